"""A model's chat template: rendered as transformers renders it (sandboxed), probed with known assistant
turns, and read back: :func:`detect` finds the built-in grammar that reads them back, :func:`derive_grammar`
builds one when none does.

Registers the template reader :func:`grammar_parse.load_grammar` uses for a model directory or chat template.
"""

from __future__ import annotations

from .._engine.library import register_chat_template_reader
from ._chat_template import ChatTemplate, load_chat_template, render_prompt
from ._derive import derive_grammar
from ._detect import Detection, DetectionWarning, detect, load_model_grammar

register_chat_template_reader(load_model_grammar)

__all__ = ["ChatTemplate", "Detection", "DetectionWarning", "derive_grammar", "detect", "load_chat_template",
           "load_model_grammar", "render_prompt"]
