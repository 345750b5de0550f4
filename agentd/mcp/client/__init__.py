"""The MCP client half: one declared server (``facade.MCPClient``) and all of
them as one catalogue (``toolbox.Toolbox``).  Its sans-IO rules live in
``rules/`` (the session, the revision chosen once per peer, the fault policy),
its IO beside them, OAuth under ``oauth/``.  It never imports the server half.
"""
