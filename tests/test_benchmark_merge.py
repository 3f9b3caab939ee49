"""`--merge` of benchmark results: merging a merged result again keeps every file its rows came from."""
import json


def test_merging_a_merged_result_names_every_source(tmp_path, load_benchmark):
    fd = load_benchmark("forecast_defaults")
    row = lambda name: {"set": name, "mase": {}}                                    # noqa: E731
    for name, sets in (("a.json", ["m3_yearly"]), ("b.json", ["etth2"]), ("c.json", ["m4_hourly"])):
        (tmp_path / name).write_text(json.dumps({"threads": 1, "rows": [row(s) for s in sets]}))
    ab, abc = tmp_path / "ab.json", tmp_path / "abc.json"
    assert fd.main(["--merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(ab)]) == 0
    assert fd.main(["--merge", str(ab), str(tmp_path / "c.json"), "--out", str(abc)]) == 0
    merged = json.loads(abc.read_text())
    assert merged["merged_from"] == ["a.json", "b.json", "c.json"]
    assert [r["set"] for r in merged["rows"]] == ["m4_hourly", "m3_yearly", "etth2"]


def test_a_set_run_again_replaces_its_row_in_the_merge(tmp_path, load_benchmark):
    fd = load_benchmark("forecast_defaults")
    old = {"threads": 1, "rows": [{"set": "m3_yearly", "mase": {"auto": 2.0}}, {"set": "etth2", "mase": {"auto": 1.0}},
                                  {"set": "etth2", "etth2_rows": 2880, "mase": {"auto": 0.9}}]}
    new = {"threads": 1, "rows": [{"set": "etth2", "mase": {"auto": 0.8}}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert fd.main(["--merge", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--out", str(tmp_path / "m.json")]) == 0
    rows = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert [(r["set"], r.get("etth2_rows"), r["mase"]["auto"]) for r in rows] == \
        [("m3_yearly", None, 2.0), ("etth2", None, 0.8), ("etth2", 2880, 0.9)]


def test_the_macro_set_is_statsmodels_twelve_quarterly_series_in_long_format(load_benchmark):
    fd = load_benchmark("forecast_defaults")
    df = fd.load("us_macro_quarterly", None)
    assert list(df.columns) == ["unique_id", "ds", "y"] and fd.SETS["us_macro_quarterly"] == (8, 4)
    sizes = df.groupby("unique_id", sort=False).size()
    assert len(sizes) == 12 and (sizes == 203).all() and "realgdp" in sizes.index and "year" not in sizes.index
    gdp = df[df["unique_id"] == "realgdp"]
    assert gdp["ds"].tolist() == list(range(203)) and abs(gdp["y"].iloc[0] - 2710.349) < 1e-9   # 1959 Q1
