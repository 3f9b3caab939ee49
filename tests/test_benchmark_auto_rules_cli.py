"""benchmarks/forecast_auto_rules_cli.py: auto's rules re-scored on what the command itself forecast."""
import json

import numpy as np
import pandas as pd
import pytest


def test_auto_rules_on_the_clis_own_run_reproduce_its_auto(tmp_path, load_benchmark, monkeypatch):
    """forecast_auto_rules_cli.py records auto's candidates during the command's run; re-scoring the default
    rule on the recording gives the command's own auto MASE, and every rule is scored."""
    arc = load_benchmark("forecast_auto_rules_cli")
    rng = np.random.default_rng(0)
    frame = pd.concat([pd.DataFrame({"unique_id": f"s{i}", "ds": np.arange(n), "y": 10 + np.cumsum(rng.normal(0.2, 1, n))})
                       for i, n in enumerate([14, 40, 40, 40, 60, 60])])
    monkeypatch.setattr(arc, "SETS", {"toy": (4, 1)})
    monkeypatch.setattr(arc, "load", lambda name, rows: frame)
    assert arc.main(["--sets", "toy", "--max-epochs", "1", "--keep", str(tmp_path / "rec"),
                     "--out", str(tmp_path / "r.json"), "--defaults-out", str(tmp_path / "d.json")]) == 0
    row = json.loads((tmp_path / "r.json").read_text())["rows"][0]
    default = json.loads((tmp_path / "d.json").read_text())["rows"][0]      # the same run, as forecast_defaults
    assert default["mase"] == pytest.approx(row["reported"], rel=1e-12) and default["series_scored"] == 6
    assert default["command"].startswith("frozenvit forecast backtest --csv toy.csv --h 4 --season-length 1")
    assert row["shipped_matches"] and set(row["rules"]) == set(arc.RULES) | set(arc.RIVALS)
    assert row["rules"][arc.DEFAULT]["mase"] == pytest.approx(row["reported"]["auto"], rel=1e-9)
    assert [p.name for p in (tmp_path / "rec").iterdir()] == ["toy.npz"]        # nothing half-written beside it
    # the kept recording scores the same, without running anything
    assert arc.main(["--from-kept", str(tmp_path / "rec" / "toy.npz"), "--out", str(tmp_path / "k.json")]) == 0
    again = json.loads((tmp_path / "k.json").read_text())["rows"][0]
    assert again["rules"] == row["rules"] and again["reported"] == row["reported"] and again["noise"] == row["noise"]
    call, season, wall = arc.kept(tmp_path / "rec" / "toy.npz")  # the median column rebuilt from its members
    assert wall == again["wall_seconds"] == row["wall_seconds"] > 0
    m, ok = arc.window_mase(call, season)                         # on the series every candidate forecast
    assert ok.tolist() == [1, 2, 3, 4, 5] and m.shape[2] == 1 and "window_split_oracle" not in row["noise"]
    cols = [v for k, v in arc.COLUMNS.items() if k != "auto"]
    assert m.mean(axis=(1, 2)) == pytest.approx(call["per_series"][cols].iloc[ok].mean().to_numpy())


def test_noise_half_splits_and_bootstrap(load_benchmark):
    """A candidate best on every series by far: the choice on one half is the best on the other, always, and
    auto equal to it is within 2 % on every draw; auto 10 % behind it on every series never is."""
    arc = load_benchmark("forecast_auto_rules_cli")
    rng = np.random.default_rng(1)
    cands = [v for k, v in arc.COLUMNS.items() if k != "auto"]
    x = pd.DataFrame(rng.uniform(2, 3, (20, len(cands))), columns=cands)
    x[arc.COLUMNS["theta"]] = rng.uniform(0.5, 1, 20)
    x[arc.COLUMNS["auto"]] = x[arc.COLUMNS["theta"]]
    n = arc.noise(x, draws=50)
    assert n["half_split_oracle"]["within_2pct"] == 1 and n["half_split_oracle"]["median"] == 1
    assert n["half_split_auto"]["p95"] == pytest.approx(1) and n["bootstrap_auto"]["within_2pct"] == 1
    x[arc.COLUMNS["auto"]] = 1.1 * x[arc.COLUMNS["theta"]]
    n = arc.noise(x, draws=50)
    assert n["half_split_auto"]["within_2pct"] == 0 and n["bootstrap_auto"]["median"] == pytest.approx(1.1)
    assert "window_split_oracle" not in n                                    # no windows given
    # four test windows: theta best on three, seasonal naive (by far) on the fourth; a choice on half of the
    # windows is always within 2 %, a choice on the fourth window alone is not
    w = np.ones((len(cands), 20, 4))
    w[cands.index(arc.COLUMNS["theta"]), :, :3] = 0.5
    w[cands.index(arc.COLUMNS["snaive"]), :, 3] = 0.9
    n = arc.noise(x, draws=50, windows=w)["window_split_oracle"]
    assert n["windows"] == 4 and n["half"]["within_2pct"] == 1
    assert n["one"]["within_2pct"] == 0.75 and n["one"]["p95"] > 1.2


def test_keep_never_replaces_a_file_it_did_not_write_and_from_kept_names_a_wrong_file(tmp_path, load_benchmark):
    arc = load_benchmark("forecast_auto_rules_cli")
    mine = tmp_path / "m4_hourly.npz"
    mine.write_bytes(b"the user's own file")
    with pytest.raises(SystemExit, match="is not a recording this benchmark wrote"):
        arc.keep(mine, {}, 24, 1.0)
    assert mine.read_bytes() == b"the user's own file"
    with pytest.raises(SystemExit, match="not a recording written by --keep"):
        arc.kept(mine)


def test_networks_only_in_the_medians_never_weighs_a_network_alone(load_benchmark):
    """The rival "networks only in the medians": where the validation ranks DLinear and PatchTST first by far, the
    default rule takes them; the rival gives them no weight of their own and takes the best of the rest (here
    the median without seasonal naive, then Theta), and on series no network forecasts it changes nothing."""
    from frozenvit.forecasting.auto import AutoForecaster

    arc = load_benchmark("forecast_auto_rules_cli")
    aliases = ["SeasonalNaive", "Theta", "ETS", "DLinear", "PatchTST"]
    model = AutoForecaster([arc._Named(a) for a in aliases], median_of=[("Theta", "ETS", "DLinear", "PatchTST")])
    S = 6
    errors = np.tile(np.array([3.0, 1.5, 2.0, 1.0, 1.05, 1.6, 1.4])[:, None, None], (1, S, 1))   # (C + 2, S, 1)
    preds = np.ones((7, S, 1, 2))
    preds[3:5, 4:] = np.nan                              # the last two series: too short for the networks
    errors[3:5, 4:] = np.nan
    errors[5:, 4:] = np.nan                              # their medians are of fewer members: not validated
    call = {"model": model, "preds": preds, "errors": errors}
    shipped = arc.rule_weights(call, **arc.RULES[arc.DEFAULT])
    assert shipped[:, 0].tolist() == [0, 0, 0, 0.5, 0.5, 0, 0]              # DLinear and PatchTST
    rival = arc.rule_weights(call, **next(iter(arc.RIVALS.values())))
    assert rival[3:5].sum() == 0
    assert rival[:, 0].tolist() == [0, 0.5, 0, 0, 0, 0, 0.5]                # Theta and the median without snaive
    assert rival[:, 4:].tolist() == shipped[:, 4:].tolist() == [[0, 0], [1, 1], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0]]


def test_merge_keeps_each_seed_and_chooses_on_seed_zero(tmp_path, load_benchmark):
    """Rows of one set run with other seeds stay beside each other (a later file replaces only the same seed);
    a row's seed comes from the command's --seed where the row does not name it; the choice reads seed 0."""
    arc = load_benchmark("forecast_auto_rules_cli")
    keys = list(arc.RULES)

    def row(seed, ratio, extra=None):
        r = {"set": "m4_hourly", "etth2_rows": None, "command_extra": extra if extra is not None else [],
             "rules": {k: {"over_best": ratio if k == keys[1] else 1.05, "over_ets_theta": 0.9} for k in keys}}
        return r if extra is not None else {**r, "seed": seed}
    paths = []
    for i, rows in enumerate([[row(0, 1.01), row(1, 0.5, ["--seed", "1"])], [row(1, 0.9), row(2, 0.8)]]):
        paths.append(tmp_path / f"p{i}.json")
        paths[-1].write_text(json.dumps({"threads": 1, "rows": rows}))
    _, rows = arc.merged(paths)
    assert [(r["seed"], r["rules"][keys[1]]["over_best"]) for r in rows] == [(0, 1.01), (1, 0.9), (2, 0.8)]
    assert arc.seed_of({"command_extra": ["--max-epochs", "2", "--seed", "3"]}) == 3 and arc.seed_of({}) == 0
    c = arc.choose(rows)
    assert c["sets"] == ["m4_hourly"] and c["chosen"] == keys[1] and c["mean_over_best"][keys[1]] == 1.01
