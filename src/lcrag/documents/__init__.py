from lcrag.documents.loaders import load_document, load_documents

__all__ = ["load_document", "load_documents"]
