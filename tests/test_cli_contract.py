"""What a person meets at the command line: one clear line for an error, complete --help, a default
model that is found (or a message naming --model) wherever Jev is installed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import jev.command as command
from jev.cli import build_parser, main
from jev.schema import JevError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["decide", "--model", "models/nope", "--task", "chat", '{"message": "hi"}'], "--model models/nope"),
        (["decide", "--model", str(ROOT / "models/default"), "--task", "nope", "{}"], "no task 'nope'"),
        (["decide", "--model", str(ROOT / "models/default"), "--task", "chat", "{"], "not JSON"),
        (["serve", "--model", "models/nope"], "--model models/nope"),
        (["serve", "--model", str(ROOT / "models/default"), "--max-batch", "0"], "max_batch must be at least 1"),
        (["calibrate", "--model", "models/nope", "--task", "mail", "--data", "x.jsonl"], "models/nope"),
        (["report", "--model", "models/nope", "--task", "mail", "--data", "x.jsonl", "--out", "r"], "models/nope"),
        (["train", "decide", "--task", "schemas.mail:TASK", "--data", "x.jsonl", "--valid", "x.jsonl", "--out", "o",
          "--base", "models/nope"], "--base models/nope"),
        (["train", "lm", "--corpus", "nope.txt", "--out", "lm", "--config", "tiny"], "nope.txt"),
        (["train", "drafter", "--target", "models/nope", "--corpus", "c.txt", "--out", "d",
          "--task", "schemas.mail:TASK"], "models/nope"),
    ],
)
@pytest.mark.slow
def test_a_user_error_is_one_line_and_exit_code_2(argv, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err
    assert "Traceback" not in out + err


@pytest.mark.parametrize(("body", "says"), [("", "body: String should have at least 1 character"),
                                            (" \n ", "$: the input has no text to read")])
@pytest.mark.slow
def test_jev_decide_refuses_an_input_with_nothing_to_read(body, says, capsys):
    model = str(ROOT / "models" / "default")
    assert main(["decide", "--model", model, "--task", "mail", json.dumps({"body": body})]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: invalid input for task 'mail':") and says in err and not out


@pytest.mark.slow
@pytest.mark.parametrize("module", ["jev.cli", "jev.serve.cli"])
def test_the_entry_points_print_no_traceback_for_a_wrong_model_path(module, tmp_path):
    argv = ["decide", "--task", "chat", '{"message": "hi"}'] if module == "jev.cli" else []
    done = subprocess.run([sys.executable, "-m", module, *argv, "--model", "models/nope"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: --model models/nope: no such folder; pass --model the "
                                                "model folder to use"]


def test_ctrl_c_is_one_line_and_exit_code_130(capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    args = build_parser().parse_args(["profile"])
    args.func = interrupted
    assert command.run(args) == 130
    out, err = capsys.readouterr()
    assert (out, err) == ("", "interrupted\n")


def _subcommand(*names: str):
    parser = build_parser()
    for name in names:
        parser = next(a for a in parser._actions if a.dest in ("command", "what")).choices[name]
    return parser


@pytest.mark.parametrize("names", [("train", "decide"), ("calibrate",), ("report",)])
def test_help_states_every_default_and_the_row_format(names):
    parser = _subcommand(*names)
    text = parser.format_help()
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{action.option_strings} has no help"
        if action.default not in (None, False) and not action.required:
            assert "default" in action.help, f"{action.option_strings} does not state its default"
            if isinstance(action.default, int | float | str):
                assert str(action.default) in action.help % {"default": action.default}
    assert '{"input": {' in text and '"label": {' in text, "the JSONL row format"
    if names != ("calibrate",):
        assert "--out" in text and next(a for a in parser._actions if a.dest == "out").help
    else:
        assert "no --out" in text, "calibrate writes into the model folder, and says so"


def test_the_default_model_is_found_from_an_installed_copy_or_named_as_missing(tmp_path, monkeypatch):
    installed = tmp_path / "site-packages" / "jev" / "command.py"
    monkeypatch.setattr(command, "__file__", str(installed))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(JevError, match="pass --model"):
        command.model_folder(None)
    assert main(["decide", "--task", "mail", '{"body": "hi"}']) == 2
    here = tmp_path / "models" / "default"
    here.mkdir(parents=True)
    (here / "jev.json").write_text("{}")
    assert command.model_folder(None) == here
    monkeypatch.setattr(command, "__file__", str(ROOT / "jev" / "command.py"))
    (here / "jev.json").unlink()
    assert command.model_folder(None) == ROOT / "models" / "default", "an editable install finds its checkout"
