"""How a task's rendered input is framed for the model, chosen per task when it is trained.

- `fields`: the field lines alone (`jev.schema.render_input`), after the model's bos token;
- `described`: the task's description, a blank line, then the field lines, after the bos token;
- `chat`: the base's chat template, the description as the system turn and the field lines as the
  user's, ending in the assistant's generation prompt. It is the layout an instruct base was tuned
  on; the template writes its own first token, so no bos is added.

The framing is recorded in `jev.json` with the task, so serving frames an input exactly as training did.
"""

from functools import lru_cache

from jinja2 import Template
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from jev.schema import JevError, Task

RENDERINGS = ("fields", "described", "chat")


def framed(rendering: str, task: Task, fields: str, chat_template: str | None) -> tuple[str, bool]:
    """The text the model reads for the field lines `fields`, and whether the bos token goes before it."""
    if rendering == "fields":
        return fields, True
    if rendering == "described":
        return (f"{task.description}\n\n{fields}" if task.description else fields), True
    if rendering == "chat":
        messages = [{"role": "system", "content": task.description}] if task.description else []
        messages.append({"role": "user", "content": fields})
        return _template(_chat_template(chat_template)).render(messages=messages, add_generation_prompt=True), False
    raise JevError(f"unknown rendering {rendering!r}; one of {list(RENDERINGS)}")


def check_rendering(rendering: str, chat_template: str | None) -> None:
    """Refuse a rendering this model cannot frame, before anything trains on it."""
    if rendering not in RENDERINGS:
        raise JevError(f"unknown rendering {rendering!r}; one of {list(RENDERINGS)}")
    if rendering == "chat":
        _template(_chat_template(chat_template))


def _chat_template(chat_template: str | None) -> str:
    if not chat_template:
        raise JevError("rendering 'chat' needs a chat template, and this model's tokenizer_config.json has none")
    return chat_template


@lru_cache(maxsize=8)
def _template(source: str) -> Template:
    try:
        return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    except TemplateError as exc:
        raise JevError(f"the model's chat template does not parse: {exc}") from exc
