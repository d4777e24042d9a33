from lcrag.documents.loaders import load_document, load_documents

# Each format registers its loader where it is defined; importing the modules registers them (their libraries are
# imported only when a file of that format is read). Help texts list the formats in this order.
from lcrag.documents import markdown, pdf, docx, html, epub  # noqa: E402,F401,I001  (after loaders: they extend it)

__all__ = ["load_document", "load_documents"]
