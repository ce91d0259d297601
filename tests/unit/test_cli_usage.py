"""Mistyped commands and options get click's usage answer (usage line, one error line with
click's suggestions, exit 2), whichever click the installed typer runs on."""

import pytest

from testbed.cli import main


@pytest.mark.parametrize("argv,needles", [
    (["bogus"], ["Usage:", "No such command 'bogus'"]),
    (["valdate", "x.yaml"], ["No such command 'valdate'", "Did you mean 'validate'"]),
    (["run", "x.yaml", "--bogus"], ["Usage:", "run [OPTIONS]", "No such option: --bogus"]),
    (["run", "x.yaml", "--monitor-intervall", "1s"], ["No such option: --monitor-intervall",
                                                      "Possible options: --monitor-interval"]),
    (["run", "x.yaml", "--monitor-interval"], ["'--monitor-interval' requires an argument"]),
    (["predict", "x.yaml"], ["Missing option '--profile'"]),
])
def test_usage_errors_exit_2_with_clicks_answer(capsys, argv, needles):
    assert main(argv) == 2
    captured = capsys.readouterr()
    errors = [ln for ln in captured.err.splitlines() if ln.lower().startswith("error:")]
    assert len(errors) == 1, captured.err
    for needle in needles:
        assert needle in captured.err, captured.err
    assert "Traceback" not in captured.err + captured.out


def test_help_still_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "Usage:" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["0.5ms", "10us", "1ns"])
def test_monitor_interval_below_a_millisecond_is_refused(text):
    from testbed.cli.common import parse_interval
    from testbed.config.errors import UserError
    with pytest.raises(UserError, match="--monitor-interval .*at least 1ms"):
        parse_interval(text)


def test_monitor_interval_zero_turns_the_monitors_off():
    from testbed.cli.common import parse_interval
    assert parse_interval("0") is None and parse_interval("1ms") == pytest.approx(1e-3)


def test_progress_in_a_log_is_one_line_per_label_with_the_seconds_so_far():
    import io

    from rich.console import Console

    from testbed.cli.common import progress_reporter
    sink = io.StringIO()
    console = Console(file=sink, force_terminal=False, width=200)
    now = iter([100.0, 101.0, 102.5, 190.0])  # start, then one reading per line printed
    with progress_reporter("draw", console=console, clock=lambda: next(now)) as progress:
        progress("calibrating: per-call costs at 4 KiB", 0, 0)
        progress("calibrating: per-call costs at 4 KiB", 0, 0)   # the same label: no new line
        progress("c000-e3127e0e repeat 0", 1, 36)
        progress("c001-20924241 repeat 0", 2, 36)
    lines = sink.getvalue().splitlines()
    assert lines == ["[     1 s] calibrating: per-call costs at 4 KiB", "[     2 s] c000-e3127e0e repeat 0 (1/36)",
                     "[    90 s] c001-20924241 repeat 0 (2/36)"]
