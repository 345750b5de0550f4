"""The MCP server half: the handler framework (``handler``) behind the rules of
each revision (``rules/``), served over HTTP (``http/``, split by concern), with
TLS and bearer trust (``auth``).  It never imports the client half.
"""
