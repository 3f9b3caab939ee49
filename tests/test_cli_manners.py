"""The `frozenvit` command's manners: defaults in every --help, named errors (exit 2) for a user's
mistakes, one line and a log file (exit 1) for our own bugs."""
import argparse

import pytest

from frozenvit.backbone.suite import cli
from frozenvit.backbone.suite.cli import build_parser, main


def _leaf_parsers(parser, prefix=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(prefix), parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _leaf_parsers(child, (*prefix, name))


LEAVES = dict(_leaf_parsers(build_parser()))


def test_every_command_is_found():
    assert {"demo", "backbone info", "backbone inspect", "distill", "anomaly fit", "control train",
            "forecast backtest"} <= set(LEAVES)


@pytest.mark.parametrize("command", sorted(LEAVES))
def test_every_option_has_help_text_and_shows_a_real_default(command):
    """A default worth showing is shown; "(default: None)" and a default on a required option never are."""
    parser = LEAVES[command]
    text = " ".join(parser.format_help().split())
    assert "(default: None)" not in text, command
    for action in parser._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        flag = max(action.option_strings, key=len)
        assert action.help, f"{command} {flag} has no help text"
        shown = parser._get_formatter()._get_help_string(action)
        if action.required:
            assert "(default" not in shown, f"{command} {flag}"
        elif isinstance(action, argparse._StoreConstAction):
            continue
        elif action.default is not None:
            assert "(default" in shown, f"{command} {flag}"


def test_help_leaves_out_none_defaults_and_required_options_defaults():
    p = cli.Parser(prog="x")
    p.add_argument("--need", required=True, help="a required one")
    p.add_argument("--maybe", default=None, help="when absent: the model's own")
    p.add_argument("--n", type=int, default=3, help="a count")
    text = " ".join(p.format_help().split())
    assert "a required one (default" not in text and "the model's own (default" not in text
    assert "a count (default: 3)" in text


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("frozenvit ")


def test_the_crash_handler_ends_in_one_line_when_its_log_folder_cannot_be_written(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the log folder should be")
    monkeypatch.setattr(cli, "LOG_DIR", blocker / "logs")

    def boom(args):
        raise KeyError("an internal slip")

    monkeypatch.setattr(cli, "_cmd_demo", boom)
    assert main(["demo", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bug in frozenvit" in err and "no log could be written" in err


def test_a_bad_hyperparameter_from_sklearn_validation_exits_2(monkeypatch, capsys):
    from sklearn.utils._param_validation import InvalidParameterError

    def bad(args):
        raise InvalidParameterError("The 'k' parameter of Thing must be an int in the range [1, inf). Got 0 instead.")

    monkeypatch.setattr(cli, "_cmd_demo", bad)
    assert main(["demo", "--out", "unused"]) == 2
    assert "InvalidParameterError" in capsys.readouterr().err


def test_a_warning_of_any_command_is_one_line_and_the_display_is_restored_after(monkeypatch):
    import warnings

    shown, lines = warnings.formatwarning, []

    def warns(args):
        lines.append(warnings.formatwarning("only 2 held-out normals; give more", UserWarning, "cli.py", 193))
        warnings.warn("only 2 held-out normals; give more", UserWarning)

    monkeypatch.setattr(cli, "_cmd_demo", warns)
    with pytest.warns(UserWarning, match="held-out normals"):              # a caller recording them still does
        assert main(["demo", "--out", "unused"]) == 0
    assert lines == ["warning: only 2 held-out normals; give more\n"]      # no file, line number or source line
    assert warnings.formatwarning is shown


def test_a_usage_mistake_is_a_named_error_with_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["forecast", "backtest", "--no-such-flag"])
    assert e.value.code == 2
    assert "error (UsageError)" in capsys.readouterr().err


def test_weights_without_a_backbone_name_is_refused(tmp_path, capsys):
    w = tmp_path / "w.safetensors"
    w.write_bytes(b"x")
    assert main(["backbone", "info", "--weights", str(w)]) == 2
    err = capsys.readouterr().err
    assert "UsageError" in err and "--backbone NAME --weights FILE" in err


def test_our_own_bug_prints_one_line_and_the_log_path_with_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "LOG_DIR", tmp_path)

    def boom(args):
        raise KeyError("an internal slip")

    monkeypatch.setattr(cli, "_cmd_demo", boom)
    assert main(["demo", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bug in frozenvit" in err
    logs = list(tmp_path.glob("crash-*.log"))
    assert len(logs) == 1 and "KeyError" in logs[0].read_text() and "Traceback" in logs[0].read_text()


def test_number_refuses_values_outside_the_range_instead_of_reinterpreting_them():
    parse = cli.number(int, min=1)
    assert parse("3") == 3
    for bad in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    frac = cli.number(float, min=0, max=1, min_open=True)
    assert frac("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError):
        frac("0")


def test_random_weights_without_a_name_are_the_default_architecture_with_random_init():
    from frozenvit.backbone import load_backbone

    default, rand = load_backbone(), load_backbone(pretrained=False)
    assert rand.config.name == default.config.name and rand.config.pretrained is False
    assert rand.config.mean == default.config.mean
    a = default.model.state_dict()["blocks.0.attn.qkv.weight"]
    b = rand.model.state_dict()["blocks.0.attn.qkv.weight"]
    assert not (a.float() == b.float()).all()


@pytest.mark.parametrize("argv", [[], ["anomaly"], ["control"], ["forecast"], ["backbone"]])
def test_a_missing_subcommand_is_named_by_its_choices_not_an_internal_name(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "required: {" in err and "_command" not in err and "_cmd" not in err, err


def test_a_failing_demo_section_leaves_the_others_in_the_report_and_the_command_exits_1(tmp_path, monkeypatch,
                                                                                        capsys):
    from frozenvit.backbone.suite import demo
    from frozenvit.backbone.suite.report import Section

    class Entry:
        def __init__(self, name, make):
            self.name, self._make = name, make

        def load(self):
            return self._make

    def fine(ctx):
        return Section("a fine section", order=1).text("all well")

    def broken(ctx):
        raise RuntimeError("a section slipped")

    monkeypatch.setattr(demo, "entry_points", lambda group: [Entry("broken", broken), Entry("fine", fine)])
    assert main(["demo", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "demo section broken failed" in err and "--only" in err
    html = (tmp_path / "r" / "index.html").read_text()
    assert "a section slipped" in html and "all well" in html
    assert main(["demo", "--out", str(tmp_path / "r"), "--only", "fine"]) == 0
