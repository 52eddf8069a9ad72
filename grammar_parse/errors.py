"""Every error grammar_parse raises, rooted in one class.

::

    GrammarParseError                      code, hint, str() says what to change
    ├── TemplateError      (ValueError)     bad response template; .path like "fields.tool_calls.open_pattern"
    ├── GrammarError       (ValueError)     bad .lark grammar; .line, .column
    ├── ChatTemplateError  (ValueError)     a chat template that cannot be loaded or rendered; .origin, .line
    ├── ParseError         (ValueError)     model output that cannot be parsed; .field, .position, .message_so_far
    │   └── PlaceholderError (KeyError)     a transform names a placeholder that does not exist
    ├── SchemaTypeError    (TypeError)      a legacy response_schema node got a value of the wrong kind
    ├── ArgumentError      (ValueError)     a bad argument to the API (missing prefix, batch length mismatch)
    ├── SchemaNameError    (KeyError)       a wire schema the package does not ship
    ├── UsageError         (RuntimeError)   the API used out of order (a result before it exists)
    │   └── FinalizedError                  feed() or finalize() after finalize()
    ├── UpstreamError                       the gateway's model server failed (grammar_parse.serving._backends); .status
    └── CommandLineError                    a bad command line (grammar_parse._cli); exit status 2

    AnchorWarning          (UserWarning)    a prefix holds none of the grammar's start anchors

Where transformers raises a built-in type for the same situation, ours is also that type, so code written
against transformers keeps catching what it caught. ``ERROR_CODES`` lists every stable code with the
situation it names; the tests check that each code raised is listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ERROR_CODES: dict[str, str] = {
    # template loading
    "template.type": "the template (or a part of it) has the wrong JSON type",
    "template.version": "the template declares a version other than 1",
    "template.unknown_key": "the template or a field has a key the format does not define",
    "template.fields": "the template has no fields, more than MAX_TEMPLATE_FIELDS (128), or more than one field "
                       "without an opener",
    "template.delimiter": "an open/close/start_anchor delimiter is empty, of the wrong type, or given twice",
    "template.regex": "a delimiter or content-parser pattern is not a valid regular expression",
    "template.regex_backtracking": "a pattern's repeats can match one text in so many ways that a backtracking "
                                   "engine would run for ever on a near miss (grammar_parse._engine.regex_safety)",
    "template.regex_size": "a pattern's counted repeat is above MAX_REPEAT (1000), it is too large to analyse, or its "
                           "linear fallback has more than MAX_CHOICE_POINTS (256) choice points",
    "template.content": "a field names an unknown content parser or gives it bad arguments",
    "template.join": "'join' is not a string or is used without 'repeats'",
    "template.transform": "a transform mixes a placeholder with text, or transform_each is misused",
    "template.named_groups": "a delimiter pattern captures named groups but the field has no transform",
    "template.start_anchor": "the template defines neither start_anchor nor start_anchor_pattern",
    "template.depth": "the template or legacy schema nests lists and objects deeper than MAX_TEMPLATE_DEPTH",
    "template.tokenizer_config": "a tokenizer_config.json (or chat_template.json) carries no response_template or "
                                 "response_schema",
    # authored grammars
    "grammar.syntax": "the .lark text is not a valid Lark grammar",
    "grammar.directive": "a //@ directive line is malformed or names an unknown region",
    "grammar.conflict": "the grammar is ambiguous for an LALR(1) parser (shift/reduce or reduce/reduce)",
    "grammar.region": "a region's rules or terminals are missing or inconsistent",
    "grammar.not_found": "no built-in grammar or file has that name",
    "grammar.encoding": "a grammar or template file is not UTF-8 text",
    "detect.no_match": "no built-in grammar reads a model's chat template back and none could be derived from it",
    "usage.not_utf8": "a warning (the command line's stream): the model output held bytes that are not UTF-8, "
                      "each sequence read as U+FFFD",
    "serve.no_token": "a warning (the command line's serve): the gateway listens beyond this machine without a "
                      "bearer token",
    "detect.by_name": "a warning (DetectionWarning): the chat template renders none of the probes (it needs a "
                      "variable it was not given), so the grammar was chosen by the model's name alone",
    "grammar.regex_backtracking": "a terminal's regex can backtrack catastrophically (as template.regex_backtracking)",
    "grammar.regex_size": "a terminal's regex has a counted repeat above MAX_REPEAT, is too large to analyse, or its "
                          "linear fallback has more than MAX_CHOICE_POINTS (256) choice points",
    # chat templates (grammar_parse.templates._chat_template)
    "chat_template.missing": "a tokenizer config, chat_template.json or model directory holds no chat template",
    "chat_template.name": "a named chat template is not among the model's templates (or none is the default)",
    "chat_template.file": "a chat template file or model directory is missing, unreadable, not UTF-8 or not the "
                          "JSON it should be (or its JSON nests deeper than MAX_FILE_JSON_DEPTH)",
    "chat_template.config": "a \"chat_template\" entry is neither Jinja text nor a list of {name, template} entries",
    "chat_template.syntax": "the chat template is not valid Jinja",
    "chat_template.input": "messages, tools or documents are not of the shape a chat template takes (dicts), or "
                           "continue_final_message cannot continue the last message",
    "chat_template.raised": "the chat template called raise_exception (it refuses these messages)",
    "chat_template.render": "the chat template failed while rendering (an undefined value used, a wrong type, ...)",
    "chat_template.recursion": "the chat template recursed deeper than Python allows (a macro calling itself)",
    "chat_template.security": "the chat template reached for something the sandbox forbids",
    "chat_template.timeout": "rendering ran past its time limit (5 s by default)",
    "chat_template.too_large": "the template's source, its output or a value it builds is above its size limit",
    "chat_template.jinja": "jinja2 (the grammar-parse[chat-templates] extra) is not installed",
    # derived grammars (grammar_parse.templates._derive)
    "derive.no_calls": "a chat template renders no tool calls, so no grammar can be derived from it",
    "derive.shape": "a chat template's renderings show no consistent markup for reasoning or tool calls",
    "derive.round_trip": "a grammar derived from a chat template does not read its probe renderings back",
    # model output
    "parse.content": "a region's text does not parse with the field's content parser (int, float, ...)",
    "parse.json": "a json region does not hold valid JSON",
    "parse.transform": "a transform path does not fit the parsed value",
    "parse.placeholder": "a transform names a placeholder that is not defined",
    "parse.join": "a joined field produced a value that is not a string",
    "parse.missing_field": "a field marked optional: false never appeared",
    "parse.json_depth": "a json region nests deeper than the parser's max_json_depth (256 by default)",
    "parse.digits": "a number has more digits than Python converts to an int (sys.get_int_max_str_digits())",
    "parse.depth": "a pythonic region nests (or chains operators) deeper than Python's parser goes",
    "parse.tool_call": "a tool-call value is not a call with a name (its function is missing, or its name is "
                       "empty or not a string): it is not sent or kept as a call",
    "parse.arguments": "a call's arguments are not a JSON object, or stop being strict JSON part-way: the wire "
                       "sends the valid part, closed",
    "parse.json_constant": "a call's arguments hold NaN or Infinity, which strict JSON has not: the wire sends null",
    "parse.region_too_large": "a region's text is longer than max_region_chars",
    "parse.timeout": "a pattern ran past its time limit and the linear matcher cannot read it",
    "parse.missing_value": "an argument's key was written without a value (the next key or the call's close came "
                           "first): the call keeps it as \"\" with an error (reported in strict mode too)",
    "parse.duplicate_argument": "a call's argument key was written twice: the call keeps the last value with an "
                                "error (reported in strict mode too)",
    "parse.stray_text": "a call made of its arguments holds text outside every argument (not the whitespace "
                        "between them), which its value does not read: the call keeps its arguments with an error; "
                        "or a call section holds text outside every call (a call written wrong), which is dropped "
                        "(reported in strict mode too)",
    "parse.unexpected": "text or a delimiter where the grammar allows none (lenient mode discards it)",
    # a call that is wrong for the request's tools (grammar_parse._engine.wire; a call's errors, never raised)
    "call.unknown_tool": "a call names a tool the request does not offer",
    "call.type": "a call's argument has a JSON type its tool's schema does not allow",
    "call.required": "a call lacks an argument its tool's schema requires",
    "call.schema": "a call's arguments break another keyword of its tool's schema (additionalProperties, enum, "
                   "minimum, ...), or the schema itself is invalid",
    # known model glitches lenient mode repairs (a grammar's repair directive; strict mode reads them as text)
    "repair.tool_call_opener": "a call written without its wrapper's opener (Qwen3-Coder's <function=NAME> with no "
                               "<tool_call>, or Seed-OSS's <seed:tool_call>, before it) was read as a call",
    "repair.tool_call_section": "a call written without the section marker around it (Kimi K2's "
                                "<|tool_call_begin|> with no <|tool_calls_section_begin|>, DeepSeek V3.1's "
                                "<｜tool▁call▁begin｜> with no <｜tool▁calls▁begin｜>, DeepSeek V3.2's and V4's DSML "
                                "invoke with no block) was read as a call",
    "repair.args_token": "a call written without the token between its name and arguments (Mistral's "
                         "[TOOL_CALLS]NAME{...} with no [ARGS], as vLLM's Mistral tokenizer mode decodes it) was read "
                         "as a call",
    # legacy response_schema (transformers <= 5.14)
    "legacy.groups": "a schema regex matched but has several unnamed groups, or none",
    "legacy.schema": "a schema node cannot handle the value it received (wrong node type or shape)",
    "legacy.value": "text does not convert to the node's integer, number or boolean type",
    "legacy.required": "an object node's required properties are missing",
    "legacy.transform": "a jmespath transform is invalid",
    "legacy.timeout": "a schema regex ran past the time limit (catastrophic backtracking on this output)",
    # the server's upstream model server (grammar_parse.serving._backends.UpstreamBackend)
    "upstream.unreachable": "the model server could not be connected to (refused, unknown host, connect timeout)",
    "upstream.reset": "the model server dropped the connection before its stream finished",
    "upstream.status": "the model server answered an HTTP error status, or sent an error object in its stream",
    "upstream.context_length": "the model server refused the prompt as longer than its context window",
    "upstream.timeout": "the model server sent nothing for longer than the read timeout",
    "upstream.protocol": "the model server's stream is not the OpenAI completions event stream (bad JSON or shape)",
    "upstream.httpx": "httpx (the grammar-parse[serve] extra) is not installed",
    # API use
    "usage.prefix": "prefix was not given (pass the prompt, or \"\" to opt out)",
    "usage.batch": "a batch was given prefixes of the wrong number or type, or a batch row cannot be read: no output "
                   "text, a prompt that is not text, a table without the named column, a row number past the end",
    "batch.surrogate": "a batch row's text held a lone surrogate (the JSON escape \\ud800: no character), which Arrow "
                       "and Parquet strings cannot hold: it was written as U+FFFD (JSONL keeps the escape)",
    "batch.id_type": "a batch row's id is not of the id column's type (the first id's type): it was written as null",
    "usage.argument": "an argument to a public function is not of the type it takes (bytes or a chat message "
                      "where text is expected, a number as a grammar, ...); the message says what it expected",
    "usage.tools": "tools= is not a list of tool definitions (OpenAI's {type, function: {name, parameters}}, a bare "
                   "{name, parameters} or Anthropic's {name, input_schema}, or Python functions), or one has no name, "
                   "a misspelled key or a parameters schema that is not an object",
    "usage.calls_in_reasoning": "calls_in_reasoning was not one of \"never\", \"fallback\", \"always\" (or a bool)",
    "usage.finalized": "the parser was used after finalize()",
    "usage.not_finished": "a stream's final result was asked for before finish()",
    "usage.no_trace": "spans were asked for from a parser created without trace=True",
    "usage.anchor": "a prefix was given that holds none of the grammar's start anchors: it is not the prompt of "
                    "this grammar's model, and is read as output (AnchorWarning)",
    "usage.schema": "lmsp.schema_validator was asked for a schema the package does not ship",
    # decoding constraints (grammar_parse.constrain; ArgumentError)
    "constrain.unsupported": "a grammar whose tool calls cannot be exported as a decoding constraint yet (the "
                             "message says why: a payload that is not JSON, a call with no literal trigger, ...)",
    "constrain.tools": "a tool's schema cannot be made self-contained for a constraint (a broken, remote or endless reference, or past the size bounds)",
    "constrain.tool_choice": "tool_choice is not auto, required, none or a named tool among the tools",
    # command line (exit status 2)
    "usage.file": "a file named on the command line is missing, unreadable, a directory, or not UTF-8 text",
    "usage.json": "a JSON file, option or batch row is not valid JSON, or not of the shape the option needs",
    "usage.not_legacy": "convert was given a document that is not a legacy response_schema",
    "usage.grammar": "a command needs a grammar or a chat template and was given neither",
}

#: Problems strict mode reports instead of raising: the message is the one lenient mode gives (the call kept,
#: its ``errors`` entry and the ``parse_errors`` entry), since what is wrong is certain and raising would lose
#: the calls after it. Every other code under ``parse_errors`` is one strict mode raises.
REPORTED_IN_STRICT = frozenset({"parse.missing_value", "parse.duplicate_argument", "parse.stray_text"})


class GrammarParseError(Exception):
    """Root of every grammar_parse error: a stable ``code`` and a ``hint`` on what to change."""

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        if code is not None:
            self.code = code
        self.hint = hint
        self.detail = message
        super().__init__(message)

    def __str__(self) -> str:
        return self.detail if not self.hint else f"{self.detail} {self.hint}"


class TemplateError(GrammarParseError, ValueError):
    """A response template is malformed; raised when it is loaded, never while parsing.

    ``path`` names the offending spot, e.g. ``fields.tool_calls.open_pattern``.
    """

    code = "template.type"

    def __init__(self, message: str, *, path: str, code: str, hint: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message, code=code, hint=hint)


class GrammarError(GrammarParseError, ValueError):
    """An authored or built-in ``.lark`` grammar is malformed; carries the line and column."""

    code = "grammar.syntax"

    def __init__(
        self,
        message: str,
        *,
        code: str,
        source: str = "<grammar>",
        line: int | None = None,
        column: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.source = source
        self.line = line
        self.column = column
        where = source if line is None else f"{source}:{line}:{column or 1}"
        super().__init__(f"{where}: {message}", code=code, hint=hint)


class ChatTemplateError(GrammarParseError, ValueError):
    """A model's chat template cannot be loaded or refuses to render these messages.

    ``origin`` names the template (a file, or "the chat template"); ``line`` is the template line at fault
    where one is known (1-based).
    """

    code = "chat_template.render"

    def __init__(self, message: str, *, code: str, origin: str = "the chat template", line: int | None = None,
                 hint: str | None = None) -> None:
        self.origin = origin
        self.line = line
        where = origin if line is None else f"{origin}, line {line}"
        super().__init__(f"{where}: {message}", code=code, hint=hint)


class ParseError(GrammarParseError, ValueError):
    """Model output that the grammar's regions cannot turn into values.

    ``field`` is the region's field, ``position`` the offset in the text fed to the parser where the
    problem is (the region's first byte for a value that does not parse; negative when the region began in
    the replayed prompt prefix), ``line`` and ``column`` the same place counted in lines (1-based; None
    where the parser no longer holds the text, see :meth:`context`), ``expected`` the terminals the
    grammar would have taken there (for unexpected input), and ``message_so_far`` the message as it stood
    before the failure.
    """

    code = "parse.content"

    def __init__(
        self,
        message: str,
        *,
        code: str,
        field: str | None = None,
        position: int | None = None,
        message_so_far: dict[str, Any] | None = None,
        hint: str | None = None,
        line: int | None = None,
        column: int | None = None,
        expected: Iterable[str] = (),
    ) -> None:
        self.field = field
        self.position = position
        self.message_so_far = message_so_far
        self.line = line
        self.column = column
        self.expected = tuple(expected)
        super().__init__(message, code=code, hint=hint)

    def context(self, text: str, span: int = 40) -> str:
        """The line of ``text`` (the model output fed to the parser) around the error, with a caret under
        its place, as lark's ``UnexpectedInput.get_context`` shows it; "" without a position in ``text``."""
        pos = self.position
        if pos is None or not 0 <= pos <= len(text):
            return ""
        before = text[max(pos - span, 0):pos].rsplit("\n", 1)[-1]
        after = text[pos:pos + span].split("\n", 1)[0]
        return f"{before}{after}\n{' ' * len(before.expandtabs())}^\n"

    def locate(self, field: str, position: int, message_so_far: dict[str, Any]) -> ParseError:
        """Attach where the failure happened (the value functions do not know it)."""
        self.field = field
        self.position = position
        self.message_so_far = message_so_far
        self.detail = f"field '{field}' (region at offset {position}): {self.detail}"
        self.args = (self.detail,)
        return self


class PlaceholderError(ParseError, KeyError):
    """A transform refers to ``{name}`` but no capture or content value of that name exists."""

    code = "parse.placeholder"

    def __str__(self) -> str:  # KeyError would repr() the message
        return GrammarParseError.__str__(self)


class SchemaTypeError(GrammarParseError, TypeError):
    """A legacy ``response_schema`` node received a value of the wrong kind (transformers raises TypeError).

    ``node`` is the schema path, e.g. ``properties.tool_calls.items``.
    """

    code = "legacy.schema"

    def __init__(self, message: str, *, node: str, code: str = "legacy.schema", hint: str | None = None) -> None:
        self.node = node
        super().__init__(f"schema node {node}: {message}", code=code, hint=hint)


class ArgumentError(GrammarParseError, ValueError):
    """The API was called with an argument it cannot use."""

    code = "usage.prefix"


class UsageError(GrammarParseError, RuntimeError):
    """The API was used out of order: a result asked for before it exists, or a record that was not kept."""

    code = "usage.not_finished"


class SchemaNameError(GrammarParseError, KeyError):
    """A wire schema the package does not ship was asked for (``lmsp.schema_validator``); a KeyError too."""

    code = "usage.schema"

    def __str__(self) -> str:  # KeyError would repr() the message
        return GrammarParseError.__str__(self)


class FinalizedError(UsageError):
    """``feed()`` or ``finalize()`` was called on a parser that is already finalized."""

    code = "usage.finalized"


class AnchorWarning(UserWarning):
    """A prefix holds none of the grammar's start anchors (code ``usage.anchor``).

    transformers then reads the whole prefix as model output, and so do we (the conformance corpus relies
    on it), but a prompt rendered for another model family is almost always a wrong grammar or a prompt
    with the assistant header cut off, so it is said, not silently parsed."""

    code = "usage.anchor"


__all__ = [
    "ERROR_CODES",
    "REPORTED_IN_STRICT",
    "AnchorWarning",
    "ArgumentError",
    "ChatTemplateError",
    "FinalizedError",
    "GrammarError",
    "GrammarParseError",
    "ParseError",
    "PlaceholderError",
    "SchemaNameError",
    "SchemaTypeError",
    "TemplateError",
    "UsageError",
]
