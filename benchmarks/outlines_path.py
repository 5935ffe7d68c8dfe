"""The generative baseline: the same checkpoint writing its decision as JSON, constrained by Outlines.

This is how typed output is usually had today: a causal LM (transformers) decodes greedily while
Outlines' JSON-schema logits processor (outlines_core) masks every token that would leave the
schema. The schema holds the task's closed fields only, in declaration order, since those are what
Jev's heads decide in one pass.

The prompt is exactly Jev's: the token ids `Decider.encode` gives (`<bos>`, the rendered input, the
head + tail cut). They go to `model.generate` as ids, because Outlines' text entry point would
re-tokenise a decoded string; everything else is what `outlines.Generator` does per call (reset the
processor, generate with it, decode without special tokens). Batches are left-padded with `<pad>`.
"""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import outlines
import pydantic
import torch
from outlines.generator import SteerableGenerator
from outlines.types import JsonSchema
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from jev.schema import Task

# The trained answer is `json.dumps` output: `{"kind": "spam", "reply": false}`. An optional single
# space between tokens is the narrowest Outlines whitespace pattern that admits ": " and ", ".
WHITESPACE = " ?"


def closed_model(task: Task) -> type[pydantic.BaseModel]:
    """The decision model cut to its closed fields, same annotations and declaration order."""
    closed = {f.name for f in task.spec.closed_fields}
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in task.decision_model.model_fields.items() if name in closed
    }
    return pydantic.create_model(f"{task.decision_model.__name__}Closed", **fields)


@dataclass(frozen=True)
class Generated:
    """One input's answer. `seconds` and `forward_passes` are those of the batch it ran in.

    `new_tokens` counts the tokens this row generated, its closing `<eos>` included (Outlines ends
    a finished answer with `<eos>`). `forward_passes` counts every model call of the batch: the
    prefill (which yields the first token) plus one per further token of the longest row.
    """

    text: str
    value: dict[str, Any] | None
    new_tokens: int
    forward_passes: int
    seconds: float


@dataclass
class Compiled:
    """A task's Outlines generator and the wall time it took to build (vocabulary + regex FSM index)."""

    generator: SteerableGenerator
    output_model: type[pydantic.BaseModel]
    compile_seconds: float


class OutlinesDecider:
    """A Jev model folder served through transformers + Outlines, greedy only.

    The folder needs `tokenizer_config.json` beside `tokenizer.json` (Jev's bundle writer adds it),
    so that `AutoTokenizer` knows `<eos>` (the stop token) and `<pad>`.
    """

    def __init__(self, model_dir: str | Path, max_new_tokens: int = 256) -> None:
        self.hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        if self.tokenizer.eos_token_id is None or self.tokenizer.pad_token_id is None:
            raise ValueError(f"{model_dir}: the tokenizer has no eos or pad token (is tokenizer_config.json missing?)")
        self.model = outlines.from_transformers(self.hf_model, self.tokenizer)
        self.max_new_tokens = max_new_tokens
        self.compiled: dict[str, Compiled] = {}
        # Wall seconds of each task's first `decide` batch: generation, plus the compile unless
        # `compile` was called before.
        self.first_call_seconds: dict[str, float] = {}
        self._calls = 0
        self.hf_model.register_forward_pre_hook(self._count_call)

    def _count_call(self, *_: Any) -> None:
        self._calls += 1

    def compile(self, task: Task) -> Compiled:
        """Build (once per task) the Outlines generator for the task's closed-field JSON schema."""
        if task.name not in self.compiled:
            started = time.perf_counter()
            output_model = closed_model(task)
            generator = outlines.Generator(self.model, JsonSchema(output_model, whitespace_pattern=WHITESPACE))
            self.compiled[task.name] = Compiled(generator, output_model, time.perf_counter() - started)
        return self.compiled[task.name]

    def decide(self, task: Task, prompts: list[list[int]], batch_size: int = 1) -> list[Generated]:
        """Answer every prompt (Jev's token ids) in batches of `batch_size`, results in input order."""
        results: list[Generated] = []
        for start in range(0, len(prompts), batch_size):
            first = task.name not in self.first_call_seconds
            started = time.perf_counter()
            compiled = self.compile(task)
            results.extend(self._generate(compiled, prompts[start : start + batch_size]))
            if first:
                self.first_call_seconds[task.name] = time.perf_counter() - started
        return results

    def _generate(self, compiled: Compiled, prompts: list[list[int]]) -> list[Generated]:
        """One greedy `generate` call over a left-padded batch, under the task's logits processor."""
        width = max(len(ids) for ids in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + list(ids) for ids in prompts])
        attention_mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
        processor = compiled.generator.logits_processor
        processor.reset()
        calls_before = self._calls
        started = time.perf_counter()
        with torch.inference_mode():
            output = self.hf_model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_processor=LogitsProcessorList([processor]),
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=pad,
            )
        seconds = time.perf_counter() - started
        passes = self._calls - calls_before
        results = []
        for row in output[:, width:].tolist():
            ends = row.index(self.tokenizer.eos_token_id) + 1 if self.tokenizer.eos_token_id in row else len(row)
            text = self.tokenizer.decode(row[:ends], skip_special_tokens=True)
            results.append(Generated(text, parse(compiled.output_model, text), ends, passes, seconds))
        return results


def parse(output_model: type[pydantic.BaseModel], text: str) -> dict[str, Any] | None:
    """The closed-field values as JSON values, or None when the text is not a valid answer."""
    try:
        return output_model.model_validate_json(text).model_dump(mode="json")
    except pydantic.ValidationError:
        return None
