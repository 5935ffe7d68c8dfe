"""`Decider`: a pydantic decision model in, a typed answer with every value's probability out.

    decider = Decider.load("models/default")
    result = decider.decide(MailDecision, {"body": "Win a free cruise! Click here."})
    result.value.kind, round(result.probs["kind"]["spam"], 2), result.usage.decision_passes  # 'spam', 0.98, 1

One forward pass decides every closed field of a whole batch (see `jev.decide.decision`); `usage`
counts it as `decision_passes`. Text fields (the mail's `subject`) are then generated after the
decided values, continuing that pass's cache (`jev.generate.texts`), speculatively when the decider
has a drafter; `usage.generation_passes` counts those steps apart.
"""

import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel
from tokenizers import Tokenizer

from jev.decide.bundle import (
    DRAFTER_DIR,
    Manifest,
    TaskEntry,
    head_layouts,
    load_heads,
    model_id,
    save_bundle,
)
from jev.decide.calibration import TaskCalibration
from jev.decide.decision import DecisionModel
from jev.decide.kinds import kind_of
from jev.decide.prompt import check_rendering, framed
from jev.generate.answer import AnswerTokens
from jev.generate.drafters import Drafter, load_drafter
from jev.generate.profiles import ProfileMeasurement, load_profile, profile_file
from jev.generate.scheduler import LoadAwareScheduler, VerifyPolicy
from jev.generate.texts import TextSettings, WrittenTexts, cache_room, write_texts
from jev.model import LatentCache, Model
from jev.model.heads import TaskHeads
from jev.model.weights import Weights, store_weights
from jev.schema import (
    Decided,
    FieldOutcome,
    FieldPolicy,
    FieldSpec,
    InputTooLongError,
    InvalidInputError,
    JevError,
    Task,
    Usage,
    check_layout,
    compile_decision,
    describe_changes,
    load_task,
    render_input,
    render_values,
)
from jev.tokenizer import jev_tokenizer_config, load_tokenizer, load_tokenizer_config

UNSAVED = "unsaved"  # the model id of a decider built in memory: nothing measured for it is stored
NOTHING_TO_READ = (
    "the input has no text to read: every field is empty or whitespace (or holds only characters the "
    "tokenizer drops); send the text the task decides on"
)


class UnknownTaskError(JevError):
    """A decision model or task name this decider was not trained for."""


@dataclass(frozen=True)
class Encoded:
    """One validated input ready for the forward pass."""

    token_ids: list[int]
    truncated: bool


class Decider:
    """Decides the tasks of one checkpoint. Thread-compatible: one decision pass at a time."""

    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        tasks: dict[str, Task],
        decision_model: DecisionModel,
        manifest: Manifest,
        max_batch: int = 32,
        model_id: str = UNSAVED,
        drafter: Drafter | None = None,
        policy: VerifyPolicy | None = None,
        text_settings: TextSettings | None = None,
        tokenizer_config: dict | None = None,
    ) -> None:
        """`policy` picks draft and verify lengths for text fields. With a drafter and no policy, the
        load-aware scheduler is used on this machine's verify profile (`jev.generate.profiles`): the
        stored one, or one measured in the background, text fields decoding plainly until it is done."""
        self.model = model.eval()
        self.drafter = drafter
        self.policy = policy
        self.text_settings = text_settings or TextSettings()
        self._answers: dict[str, AnswerTokens] = {}
        self.tokenizer = tokenizer
        self.tasks = tasks
        self.decision_model = decision_model.eval()
        self.manifest = manifest
        self.max_batch = max_batch
        self.tokenizer_config = tokenizer_config if tokenizer_config is not None else jev_tokenizer_config()
        # Every input starts with the model's own beginning token: `<bos>` for a Jev-trained model,
        # `<|im_start|>` for SmolLM2 (config.json's bos_token_id, as transformers reads it).
        self.bos_id = model.config.bos_token_id
        if self.bos_id is None or not 0 <= self.bos_id < tokenizer.get_vocab_size(with_added_tokens=True):
            raise JevError(f"the model's bos_token_id {self.bos_id} is not a token of its tokenizer")
        for entry in manifest.tasks.values():
            check_rendering(entry.rendering, self.chat_template)
        self.model_id = model_id
        self._compute = threading.Lock()
        self.profiling: ProfileMeasurement | None = None

    @property
    def chat_template(self) -> str | None:
        """The base's chat template (`tokenizer_config.json`), which the `chat` rendering frames inputs with."""
        return self.tokenizer_config.get("chat_template")

    @property
    def calibrations(self) -> dict[str, TaskCalibration]:
        """Each calibrated task's calibration, as the folder's `jev.json` holds it."""
        return self.manifest.calibrations

    def start_profiling(self) -> None:
        """Give a drafter its load-aware scheduler: from the profile stored for this model and
        machine, else from one now measured in the background. Nothing to do without a drafter or
        with a policy already set."""
        if self.drafter is None or self.policy is not None or self.profiling is not None:
            return
        context, width = self._profile_shape()
        file = None if self.model_id == UNSAVED else profile_file(self.model_id, self.model, context, width)
        profile = load_profile(file) if file is not None else None
        if profile is not None:
            self.policy = LoadAwareScheduler(profile)
        else:
            self.profiling = ProfileMeasurement(self.model, file, self._compute, context, width)

    def _profile_shape(self) -> tuple[int, int]:
        """The cached context and verify row width the profile is measured at."""
        context = max(entry.max_input_tokens for entry in self.manifest.tasks.values())
        return context, self.text_settings.draft_len + 1

    def _text_policy(self) -> tuple[Drafter | None, VerifyPolicy | None]:
        """The drafter and policy this batch's text fields use: no drafter while a profile is measured."""
        self.start_profiling()
        if self.policy is None and self.profiling is not None and self.profiling.profile is not None:
            self.policy = LoadAwareScheduler(self.profiling.profile)
        return (self.drafter, self.policy) if self.policy is not None else (None, None)

    def check_policies(self) -> None:
        """Refuse, at load rather than per request, a calibration that cannot serve a declared policy.

        An uncalibrated task is allowed (its responses say so and carry no conformal sets); a
        calibration fitted at another coverage than the task now declares is not.
        """
        for task in self.tasks.values():
            calibration = self.calibrations.get(task.name)
            if calibration is None:
                continue
            for field_name, policy in task.policies.items():
                if policy.conformal_coverage is None:
                    continue
                fitted = calibration.conformal.get(field_name)
                if fitted is None or abs(fitted.coverage - policy.conformal_coverage) > 1e-9:
                    raise JevError(
                        f"task {task.name!r} declares conformal sets at {policy.conformal_coverage} for "
                        f"{field_name!r}, but the model's calibration has "
                        f"{'none' if fitted is None else f'coverage {fitted.coverage}'}; run `jev calibrate` again"
                    )

    @classmethod
    def load(
        cls,
        path: str | Path,
        tasks: Sequence[Task] = (),
        max_batch: int = 32,
        check_policies: bool = True,
        speculative: bool = True,
        weights: Weights = "float32",
        replay: bool = False,
    ) -> "Decider":
        """Load a decider folder. Tasks are imported from the references in `jev.json` unless given.

        A task the folder was never trained for is refused with an UnknownTaskError that says
        how to train it. A task whose decision schema differs from the one the heads were trained
        on is refused with a SchemaMismatchError that names the changed fields; so is a task whose declared
        conformal coverage its calibration was not fitted at, unless `check_policies=False` (as
        `jev calibrate` loads it, to fit that calibration). The folder's `drafter/`, if any, drafts
        text fields unless `speculative=False`; its verify profile is loaded, or starts measuring.
        `weights` other than `"float32"` stores the backbone's large matrices as float16, bfloat16 or
        both (`jev.model.weights`), and the model id says so. `replay` replays the passes that extend a
        cache as traced graphs (`jev.model.step_graphs`): a decode step at one sequence takes about 0.7x
        the time, for about 3 s more of loading, so a server takes it and a one-off command does not.
        """
        folder = Path(path)
        manifest = Manifest.read(folder)
        given = {task.name: task for task in tasks}
        untrained = [task for task in tasks if task.name not in manifest.tasks]
        if untrained:
            raise UnknownTaskError(untrained_message(untrained[0], folder, sorted(manifest.tasks)))
        resolved = {}
        for name, entry in manifest.tasks.items():
            task = given.get(name) or load_task(entry.reference)
            check_layout(task.spec, entry.layout, name)
            resolved[name] = task
        model = Model.from_pretrained(folder)
        store_weights(model, weights)
        model.replay_cached_passes(replay)
        layouts = {name: head_layouts(task.spec) for name, task in resolved.items()}
        heads = load_heads(folder, layouts, model.config.hidden_size)
        drafter = load_drafter(folder / DRAFTER_DIR, model) if speculative and (folder / DRAFTER_DIR).is_dir() else None
        decider = cls(
            model, load_tokenizer(folder), resolved, DecisionModel(model, heads, manifest.query_layer), manifest,
            max_batch, model_id(folder) + ("" if model.weights == "float32" else f"-{model.weights}"), drafter,
            tokenizer_config=load_tokenizer_config(folder),
        )
        if check_policies:
            decider.check_policies()
        decider.start_profiling()
        return decider

    @classmethod
    def new(
        cls,
        model: Model,
        tokenizer: Tokenizer,
        tasks: dict[str, Task],
        max_input_tokens: int,
        max_batch: int = 32,
        tokenizer_config: dict | None = None,
        query_layer: int = 0,
        rendering: str = "fields",
    ) -> "Decider":
        """A decider with freshly initialised heads; `tasks` maps each `module:NAME` reference to its task.

        `tokenizer_config` is the base's `tokenizer_config.json` (special tokens, chat template), kept
        as it is in the folder the decider is saved to; Jev's own when not given. The field queries
        join the input at layer `query_layer`; `rendering` frames every task's input (`jev.decide.prompt`)."""
        room = model.config.max_position_embeddings - max_input_tokens
        entries, heads = {}, {}
        for reference, task in tasks.items():
            if len(task.spec.closed_fields) > room:
                raise JevError(
                    f"task {task.name!r}: {max_input_tokens} input tokens plus {len(task.spec.closed_fields)} field "
                    f"tokens exceed the model's {model.config.max_position_embeddings} positions"
                )
            entries[task.name] = TaskEntry(reference, task.spec.layout(), task.spec.hash, max_input_tokens, rendering)
            heads[task.name] = TaskHeads(model.config.hidden_size, head_layouts(task.spec))
        by_name = {task.name: task for task in tasks.values()}
        return cls(
            model, tokenizer, by_name, DecisionModel(model, heads, query_layer),
            Manifest(entries, query_layer=query_layer), max_batch,
            tokenizer_config=tokenizer_config,
        )

    def save(self, path: str | Path) -> None:
        save_bundle(
            Path(path), self.model, self.tokenizer, self.tokenizer_config, dict(self.decision_model.heads.items()),
            self.manifest,
        )

    def task_for(self, decision: type[BaseModel] | str) -> Task:
        """The task deciding `decision`: a task name, or a decision model with the trained schema."""
        if isinstance(decision, str):
            if decision in self.tasks:
                return self.tasks[decision]
            raise UnknownTaskError(f"no task {decision!r}; this model decides {sorted(self.tasks)}")
        for task in self.tasks.values():
            if task.decision_model is decision or task.spec.hash == compile_decision(decision).hash:
                return task
        hint = ""
        for name, task in self.tasks.items():
            if task.decision_model.__name__ == decision.__name__:
                changes = describe_changes(self.manifest.tasks[name].layout, compile_decision(decision).layout())
                hint = f"; {decision.__name__} differs from task {name!r}'s trained schema: " + "; ".join(changes)
        raise UnknownTaskError(
            f"no task decides {decision.__name__}; this model decides "
            f"{ {name: t.decision_model.__name__ for name, t in self.tasks.items()} }{hint}"
        )

    def encode(self, task: Task, data: BaseModel | dict[str, Any]) -> Encoded:
        """Validate, render and tokenise one input, enforcing the task's token limit.

        An input whose values are all blank, or tokenize to nothing, is refused: the model would
        read only the template's field names, and answer that with confidence.

        A task that allows truncation keeps the first three quarters of the limit and the last
        quarter: the start of a text says what it is, its end often says where it came from (a
        mailing list's footer, a signature), and the middle is the least informative part.
        """
        instance = task.parse_input(data)
        said = "".join(render_values(task, instance)).strip()
        if not said or not self.tokenizer.encode(said).ids:
            raise InvalidInputError(f"invalid input for task {task.name!r}:", [{"loc": "$", "msg": NOTHING_TO_READ}])
        entry = self.manifest.tasks[task.name]
        text, with_bos = framed(entry.rendering, task, render_input(task, instance), self.chat_template)
        ids = [self.bos_id] * with_bos + self.tokenizer.encode(text).ids
        limit = entry.max_input_tokens
        if len(ids) <= limit:
            return Encoded(ids, truncated=False)
        if not task.truncate:
            raise InputTooLongError(len(ids), limit)
        tail = limit // 4
        return Encoded(ids[: limit - tail] + ids[len(ids) - tail :], truncated=True)

    def decide(self, decision: type[BaseModel] | str, data: BaseModel | dict[str, Any]) -> Decided:
        return self.decide_batch(decision, [data])[0]

    def decide_batch(
        self, decision: type[BaseModel] | str, inputs: Sequence[BaseModel | dict[str, Any]]
    ) -> list[Decided]:
        """Decide many inputs in `ceil(len / max_batch)` forward passes, results in input order."""
        task = self.task_for(decision)
        encoded = [self.encode(task, data) for data in inputs]
        results: list[Decided] = []
        for start in range(0, len(encoded), self.max_batch):
            results.extend(self.decide_encoded(task, encoded[start : start + self.max_batch]))
        return results

    def probabilities(
        self, task: Task, token_ids: Sequence[Sequence[int]], cache: LatentCache | None = None
    ) -> dict[str, np.ndarray]:
        """Raw (uncalibrated) head probabilities per closed field `[B, n_values]`, from one forward pass
        (which also fills `cache`, when given, with the inputs and field tokens)."""
        return self._decision_pass(task, token_ids, cache)[0]

    def _decision_pass(
        self, task: Task, token_ids: Sequence[Sequence[int]], cache: LatentCache | None
    ) -> tuple[dict[str, np.ndarray], torch.Tensor | None]:
        """`probabilities`, and with a cache the inputs' final hidden states (`DecisionOutputs.input_states`)."""
        with torch.inference_mode():
            outputs = self.decision_model(task.name, token_ids, cache=cache)
            probs = self.decision_model.heads[task.name].probabilities(outputs.logits)
        raw = {f.name: p.double().numpy() for f, p in zip(task.spec.closed_fields, probs, strict=True)}
        return raw, outputs.input_states

    def calibrated(self, task: Task, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Apply the task's fitted calibrators; raw probabilities pass through for an uncalibrated task."""
        calibration = self.calibrations.get(task.name)
        if calibration is None:
            return raw
        return {f.name: calibration.apply(f, raw[f.name]) for f in task.spec.closed_fields}

    def decide_encoded(self, task: Task, batch: Sequence[Encoded]) -> list[Decided]:
        """Decide already-encoded inputs of one task in one forward pass (the batcher's entry point)."""
        with self._compute:
            return self._decide_encoded(task, batch)

    def _decide_encoded(self, task: Task, batch: Sequence[Encoded]) -> list[Decided]:
        start = time.perf_counter()
        token_ids = [e.token_ids for e in batch]
        cache = self._decision_cache(task, token_ids) if task.spec.text_fields else None
        raw, input_states = self._decision_pass(task, token_ids, cache)
        probs = self.calibrated(task, raw)
        fields = task.spec.closed_fields
        tables = [
            {f.name: dict(zip(f.values, probs[f.name][row].tolist(), strict=True)) for f in fields}
            for row in range(len(batch))
        ]
        closed = [{f.name: kind_of(f).choose(table[f.name]) for f in fields} for table in tables]
        texts = self._write_texts(task, token_ids, closed, cache, input_states) if cache is not None else None
        compute_ms = 1e3 * (time.perf_counter() - start)
        sets = self._conformal_sets(task, probs)
        info = self.model_info(task)
        result_type = Decided[task.decision_model]
        results = []
        for row, (item, table) in enumerate(zip(batch, tables, strict=True)):
            value = task.spec.build({**closed[row], **(texts.texts[row] if texts else {})})
            usage = Usage(
                input_tokens=len(item.token_ids),
                decision_passes=1,
                generation_passes=texts.forward_passes if texts else 0,
                generated_tokens=texts.generated_tokens[row] if texts else 0,
                accepted_length=texts.accepted_length if texts else 0.0,
                compute_ms=compute_ms,
            )
            outcomes = {
                f.name: self._outcome(task, f, table[f.name], sets[f.name][row] if f.name in sets else None)
                for f in fields
            }
            model = {**info, "truncated_input": item.truncated}
            if texts:
                model["truncated_texts"] = texts.truncated[row]
            results.append(result_type(value=value, probs=table, outcomes=outcomes, usage=usage, model=model))
        return results

    def answer_tokens(self, task: Task) -> AnswerTokens:
        """The task's answer written as tokens (built once per task)."""
        if task.name not in self._answers:
            self._answers[task.name] = AnswerTokens(task.spec, self.tokenizer, self.model.config.eos_token_id)
        return self._answers[task.name]

    def _decision_cache(self, task: Task, token_ids: list[list[int]]) -> LatentCache:
        """A cache for the decision pass with room for the whole answer after it."""
        room = cache_room(self.answer_tokens(task), [len(ids) for ids in token_ids], self.text_settings.draft_len)
        return self.model.new_cache(len(token_ids), room)

    def _write_texts(
        self,
        task: Task,
        token_ids: list[list[int]],
        closed: list[dict[str, Any]],
        cache: LatentCache,
        input_states: torch.Tensor | None,
    ) -> WrittenTexts:
        drafter, policy = self._text_policy()
        with torch.inference_mode():
            return write_texts(
                self.model, self.tokenizer, self.answer_tokens(task), token_ids, closed, cache,
                self.text_settings, drafter, policy, input_states,
            )

    def model_info(self, task: Task) -> dict[str, Any]:
        """Which model, schema and calibration a decision of `task` comes from."""
        calibration = self.calibrations.get(task.name)
        return {
            "model_id": self.model_id,
            "schema_hash": task.spec.hash,
            "calibrated": calibration is not None,
            "calibration": calibration.identity() if calibration else None,
        }

    def _conformal_sets(self, task: Task, probs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Set membership `[B, n_values]` of each field whose policy declares conformal sets.

        An uncalibrated task gets none; a calibrated one has the declared coverage (`check_policies`).
        """
        calibration = self.calibrations.get(task.name)
        if calibration is None:
            return {}
        return {
            name: calibration.conformal[name].predict_sets(probs[name])
            for name, policy in task.policies.items()
            if policy.conformal_coverage is not None
        }

    def _outcome(self, task: Task, spec: FieldSpec, table: dict[Any, float], in_set: np.ndarray | None) -> FieldOutcome:
        """Apply the field's declared policy to one row's calibrated probabilities (and set membership)."""
        confidence = kind_of(spec).confidence(table)
        threshold = (task.policies.get(spec.name) or FieldPolicy()).abstain_below
        prediction_set, coverage = None, None
        if in_set is not None:
            prediction_set = [value for value, keep in zip(spec.values, in_set, strict=True) if keep]
            coverage = self.calibrations[task.name].conformal[spec.name].coverage
        return FieldOutcome(
            abstained=threshold is not None and confidence < threshold,
            confidence=confidence,
            threshold=threshold,
            prediction_set=prediction_set,
            coverage=coverage,
        )


def load_apart(path: str | Path, **options: Any) -> Decider:
    """`Decider.load(path, **options)` in a thread that ends with the load, for a process that decides
    or measures on other threads (a server's batcher, a profile measured in the background).

    Why: a thread that has run torch's parallel regions keeps its OpenMP team while it lives, and with
    the loading thread's team idle beside it, a thread deciding a mail with its subject line took 0.66-0.72 s
    where the loading thread took 0.34-0.35 (2 cores; docs/benchmarks.md, "The service");
    once the loading thread has ended, any one thread decides as fast as it would have. The thread is a
    daemon, so Ctrl-C during the load ends the process at once."""
    outcome: dict[str, Any] = {}

    def load() -> None:
        try:
            outcome["decider"] = Decider.load(path, **options)
        except BaseException as error:  # raised again in the caller's thread
            outcome["error"] = error

    loader = threading.Thread(target=load, name="jev-load", daemon=True)
    loader.start()
    loader.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["decider"]


def untrained_message(task: Task, folder: Path, trained: list[str]) -> str:
    """Why `task` cannot load from `folder`, and the `jev train decide` command that would add it."""
    return (
        f"task {task.name!r} was never trained into {folder}, which decides {trained}. Train a model that "
        f"decides it, starting from this one:\n"
        f"  jev train decide --base {folder} --task {task_reference(task)} --data TRAIN.jsonl "
        f"--valid VALID.jsonl --out NEW_FOLDER\n"
        f"rows are JSONL {{\"input\": {{...}}, \"label\": {{...}}}}; repeat --task/--data/--valid for each "
        f"task of {trained} the new model should keep"
    )


def task_reference(task: Task) -> str:
    """`module:NAME` of the module attribute holding `task`, found where its models were defined."""
    for module_name in dict.fromkeys([task.input_model.__module__, task.decision_model.__module__]):
        module = sys.modules.get(module_name)
        for name, value in vars(module).items() if module else ():
            if value is task:
                return f"{module_name}:{name}"
    return "module:TASK"
