"""The MCP server: stepscope's tools as tools an AI coding agent can call
(``stepscope mcp LOGDIR``). ``catalog`` holds the tools and their answers, ``answers`` sizes
them for a context window, ``server`` speaks the protocol through the official SDK."""
