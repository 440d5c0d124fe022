"""trainee's Model Context Protocol server.

``trainee mcp`` runs ``python -m trainee.mcp``: the server over stdio, a client
of the daemon (:mod:`trainee.mcp.backend`). The daemon also serves it over
streamable HTTP at ``/mcp`` (:mod:`trainee.mcp.http`). Nothing here is imported
by the CLI itself: the mcp SDK loads only in those two processes.
"""
