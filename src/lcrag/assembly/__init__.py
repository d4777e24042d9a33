from lcrag.assembly.context import AssembledContext, ContextAssembler
from lcrag.assembly.truncation import TruncatedText, truncate_middle

__all__ = ["AssembledContext", "ContextAssembler", "TruncatedText", "truncate_middle"]
