"""`tt debug`: the Textual terminal debugger (the only part of tt that imports textual)."""
