"""The engine core (private): regexes and delimiters, values and content parsers, the compiled grammar and
its format, the session that walks it, and the tool-call streamer that reads calls as they arrive.

Nothing here is a public import path: the package's facade (``grammar_parse``) and the wings
(``grammar_parse.adapters``, ``.serving``, ``.templates``, ``.constrain``, ``.integrations``) are.
"""
