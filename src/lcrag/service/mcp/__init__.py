"""The MCP front end: the tools and resources over the service's collections, and its sessions."""
