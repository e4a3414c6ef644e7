"""The leaderboard page and the README's compact table are what ``docs/make_leaderboard.py`` makes
of the committed ``results.csv``, and their figures are the file's, recomputed here without it."""

from __future__ import annotations

import csv
import functools
import importlib.util
import inspect
import math
import shutil
import statistics
import sys

import pytest
import yaml
from helpers.paths import REPO
from scipy import stats

RESULTS = REPO / "benchmarks" / "results" / "cifar10_cpu" / "results.csv"
pytestmark = [
    pytest.mark.skipif(not RESULTS.is_file(), reason="no committed CIFAR-10 results"),
    # one worker, so that the page's rows are built once for the module (about 10 s each)
    pytest.mark.xdist_group("leaderboard"),
]


@pytest.fixture(scope="module")
def board():
    path = REPO / "docs" / "make_leaderboard.py"
    spec = importlib.util.spec_from_file_location("docs_make_leaderboard", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # built once per argument set: every test reads the same committed results (outputs()
    # calls the module's build_rows by name, so it shares the cache)
    cached = functools.cache(module.build_rows)
    signature = inspect.signature(module.build_rows)

    def build_rows(*args, **kwargs):  # one key however the arguments are given
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return cached(*bound.args)

    module.build_rows = build_rows
    return module


@pytest.fixture(scope="module")
def every_table(board):
    """The page's module, where every table's data is here (the Imagenette sweep's control
    resolves its runs with the images: ``../shared/data``)."""
    missing = [r.title for r in board.REGIMES if r.data is not None and not r.data.is_dir()]
    if missing:
        pytest.skip(f"the data of {', '.join(missing)} is absent (../shared/data)")
    return board


def test_the_page_and_the_readme_table_are_written_from_the_results(every_table) -> None:
    for path, text in every_table.outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run docs/make_leaderboard.py"


def _accuracies() -> dict[str, dict[int, float]]:
    return _accuracies_of(RESULTS)


def _readme_rows() -> dict[str, list[str]]:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- leaderboard:start -->", 1)[1].split("<!-- leaderboard:end -->")[0]
    rows = [ln.split("|")[1:-1] for ln in block.splitlines() if ln.startswith("| ")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows[2:]}


def test_the_readme_figures_are_the_results_files(board) -> None:
    """Mean ± std and the paired interval of each README row, recomputed from results.csv with
    numpy-free arithmetic and scipy's t quantile."""
    acc = _accuracies()
    rows = _readme_rows()
    base = acc[board.BASELINE]
    checked = 0
    for r in board.build_rows()[0]:
        label = r.label
        if label not in rows:
            continue
        cells = rows[label]
        values = list(acc[r.variant].values())
        mean = statistics.fmean(values)
        shown = f"{mean:.2f} ± {statistics.stdev(values):.2f}" if len(values) > 1 else f"{mean:.2f}"
        assert cells[3] == shown, label
        pairs = [acc[r.variant][s] - base[s] for s in acc[r.variant] if s in base]
        if r.variant != board.BASELINE and len(pairs) >= 2:
            d, sd, n = statistics.fmean(pairs), statistics.stdev(pairs), len(pairs)
            half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
            assert f"{d:+.2f} [{d - half:+.2f}, {d + half:+.2f}]" in cells[5], label
        checked += 1
    assert checked >= 3 and "ResNet-20" in rows
    # the comparisons between two variants: the pairs' own differences
    for (a, b), label in board.PAIRS.items():
        if label in rows:
            pairs = [acc[a][s] - acc[b][s] for s in acc[a] if s in acc[b]]
            d, sd, n = statistics.fmean(pairs), statistics.stdev(pairs), len(pairs)
            half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
            assert rows[label][4] == str(n), label
            assert f"{d:+.2f} [{d - half:+.2f}, {d + half:+.2f}]" in rows[label][5], label
            checked += 1
    assert board.PAIRS[board.CONTROL] in rows


def test_the_readme_shows_a_small_table_whole_and_a_large_one_cut(board) -> None:
    """A regime of six variants (the long rung) keeps its last row, below the plain network;
    the 14-variant leaderboard keeps its top rows, the plain network and GSoP's comparison
    (GSoP and its control)."""

    def row(variant: str, mean: float) -> object:
        return board.Row(variant, variant, "channel", 1e5, 1e7, 1.0, mean, 0.1, 3)

    names = ["wide_gsop", "simam", "simam_prenorm", "gsop", "none", "se"]
    six = [row(board.CIFAR_PREFIX + n, 90 - i) for i, n in enumerate(names)]
    shown = board.readme_table(six, {}, 3)[2:]
    assert len(shown) == 6 and "resnet20_se" in shown[-1]
    many = [row(f"resnet20_b{i}", 95 - i) for i in range(12)] + six
    many.sort(key=lambda r: -r.mean)
    shown = "\n".join(board.readme_table(many, {}, 3)[2:])
    assert shown.count("\n") + 1 == board.README_TOP + 3
    for kept in ("resnet20_none", "resnet20_wide_gsop", "resnet20_gsop"):
        assert kept in shown
    assert "resnet20_se" not in shown


def test_holm_runs_over_every_comparison_on_the_page(board) -> None:
    rows, pairs, facts = board.build_rows()
    compared = [r for r in [*rows, *pairs.values()] if not math.isnan(r.p)]
    assert facts["comparisons"] == len(compared)
    assert board.CONTROL in pairs and set(pairs) <= set(board.PAIRS)
    # Holm never lowers a p-value, and the smallest one is multiplied by the family's size
    smallest = min(compared, key=lambda r: r.p)
    assert smallest.holm == pytest.approx(min(1.0, smallest.p * facts["comparisons"]))
    assert all(r.holm >= r.p for r in compared)


def test_only_resolved_blocks_at_the_plain_networks_size_are_called_free_of_capacity(
    board,
) -> None:
    def row(variant: str, family: str, params: float, holm: float) -> object:
        return board.Row(variant, variant, family, params, 1.0, 1.2, 84.0, 0.1, 5, holm=holm)

    base = row(board.BASELINE, "none", 100_000, math.nan)
    same = row("same_size", "hybrid", 100_900, 0.01)  # +0.9%: named
    bigger = row("bigger", "channel", 105_000, 0.01)  # +5%: capacity may explain it
    unresolved = row("unresolved", "channel", 100_000, 0.2)
    wide = row("wide", "control", 105_000, 0.01)
    said = board._same_size_sentence([base, same, bigger, unresolved, wide])
    assert "`same_size`" in said and "bigger" not in said and "unresolved" not in said
    assert "wide" not in said
    assert board._same_size_sentence([base, bigger, unresolved]).startswith("No block")
    # SimAM at `inner` is named with its position, which is not its paper's
    moved = row(board.SIMAM[0], "hybrid", 100_000, 0.01)
    said = board._same_size_sentence([base, moved])
    assert f"`{board.SIMAM[0]}` (at `inner`, not its paper's position) " in said


def test_labels_of_points_close_in_x_are_spread_and_others_stay_at_their_points(board) -> None:
    xs = [40.5, 40.6, 40.55, 63.0, 40.5]
    ys = [83.30, 83.31, 83.25, 83.30, 84.10]
    got = board.spread_labels(xs, ys, x_near=1.0, gap=0.05)
    assert got[2] == 83.25 and got[3] == 83.30 and got[4] == 84.10  # lowest, far, alone in y
    assert got[0] == pytest.approx(83.30) and got[1] == pytest.approx(83.35)
    near = [i for i in range(5) if xs[i] < 41]
    assert all(abs(got[i] - got[j]) >= 0.05 - 1e-12 for i in near for j in near if i < j), got
    assert all(g >= y for g, y in zip(got, ys, strict=True))  # labels only move up


@pytest.mark.parametrize(
    ("diff", "low", "high", "holm", "says"),
    [
        (0.5, 0.3, 0.7, 0.01, "resolved above a network of its own size"),
        (-0.5, -0.7, -0.3, 0.01, "resolved above GSoP"),
        (-0.47, -0.75, -0.19, 0.099, "own 95% interval lies below 0, but Holm"),
        (-0.2, -0.6, 0.2, 0.6, "cannot tell GSoP from a plain network of its size"),
    ],
)
def test_the_control_sentence_says_what_the_interval_and_holm_say(
    board, diff: float, low: float, high: float, holm: float, says: str
) -> None:
    gsop, wide = board.CONTROL
    rows = [
        board.Row(gsop, gsop, "channel", 418e3, 45e6, 1.5, 83.8, 0.1, 5, diff=0.47, holm=0.02),
        board.Row(wide, wide, "control", 421e3, 63e6, 1.8, 84.3, 0.2, 5, diff=0.94, holm=0.01),
    ]
    control = board.Row(
        "control", "GSoP - control", "control", 0, 0, 1, 0, 0, 5, diff, low, high, 5
    )
    control.holm = holm
    said = board._control_sentence(rows, control)
    assert says in said and f"Holm p {holm:.3f}" in said
    assert "over 5 seeds," in said and "over 5 pairs (" in said
    control.pairs = 1
    assert "over 1 pair (" in board._control_sentence(rows, control)


def test_the_family_lines_name_each_familys_blocks_best_and_resolved(board) -> None:
    def row(variant: str, family: str, params: float, diff: float, holm: float) -> object:
        return board.Row(
            variant,
            variant,
            family,
            params,
            1.0,
            1.2,
            84.0,
            0.1,
            5,
            diff,
            diff - 0.1,
            diff + 0.1,
            5,
            holm=holm,
        )

    rows = [
        row(board.BASELINE, "none", 100_000, math.nan, math.nan),
        row("resnet20_a", "channel", 150_000, 0.5, 0.01),
        row("resnet20_b", "channel", 101_000, -0.3, 0.5),
        row("resnet20_c", "hybrid", 100_000, 0.8, 0.01),
        row("resnet20_d", "spatial", 110_000, 0.1, 0.9),
        row("resnet20_w", "control", 150_000, 0.9, 0.01),  # not a block: no family line
    ]
    lines = board._across_families(rows)
    assert lines[0].startswith("- **channel** (2 blocks: `a`, `b`): best `a` **+0.50")
    assert lines[0].endswith("resolved: `a` (+50% parameters).")
    assert lines[1] == (
        "- **hybrid** (1 block): `c` **+0.80 [+0.70, +0.90]**; resolved: `c` (no added parameters)."
    )
    assert lines[2].endswith("resolved: none.") and "control" not in "".join(lines)
    assert "channel blocks alone range from -0.30 to +0.50" in lines[-1]
    assert "best blocks from +0.10 to +0.80" in lines[-1]


def test_placements_name_positions_stages_and_blocks(board) -> None:
    assert board._placements("se") == [("standard", "every block")]
    assert board._placements(
        {"name": "nonlocal", "position": "post", "stages": [2, 3], "blocks": "last"}
    ) == [("post", "the last block of stages 2, 3")]
    two = [
        {"name": "residual_attention", "position": "stage", "stages": [1], "args": {"depth": 2}},
        {"name": "residual_attention", "position": "stage", "stages": [2], "args": {"depth": 1}},
    ]
    assert board._placements(two) == [("stage", "after stages 1, 2")]  # merged
    assert board._placements({"name": "bam", "position": "stage"}) == [
        ("stage", "after every stage")
    ]


def test_the_placement_bullet_says_how_far_simam_at_the_authors_position_has_come(board) -> None:
    wrong, right = board.SIMAM
    rows = [
        board.Row(wrong, "+ `simam` at `inner`, every block", "hybrid", 1, 1, 1, 84, 0.1, 5),
        board.Row("x", "+ `se` at `standard`, every block", "channel", 1, 1, 1, 83, 0.1, 5),
    ]
    said = board._placement_bullet(rows, {"finished": {right: 2}, "seeds": 5})
    assert "`inner`: after" in said and "`standard`: on the residual branch" in said
    assert "`prenorm`:" not in said  # only the positions in the table are explained
    assert f"`{right}` runs it there (2 of 5 seeds finished)" in said
    assert "not run yet" in board._placement_bullet(rows, {"finished": {}, "seeds": 5})
    assert "except" not in board._placement_bullet(rows[1:], {"finished": {}, "seeds": 5})


def test_simams_two_positions_are_one_comparison_and_the_families_keep_the_papers(board) -> None:
    """Once SimAM at the authors' position has pairs, the placement bullet gives its difference
    from SimAM at ``inner`` (a comparison in the Holm family), and the families section leaves
    the off-position variant out, saying so; a step time not measured reads "-"."""
    wrong, right = board.SIMAM

    def row(variant: str, diff: float, label: str = "") -> object:
        return board.Row(variant, label, "hybrid", 1e5, 1, math.nan, 84, 0.1, 5, diff,
                         diff - 0.1, diff + 0.1, 5, holm=0.01)  # fmt: skip

    rows = [row(wrong, 0.8, "+ `simam` at `inner`, every block"), row("resnet20_bam", 0.1)]
    moved = board.Row(f"{right} - {wrong}", "", "", *[math.nan] * 5, 0, 0.4, 0.2, 0.6, 5)
    moved.holm = 0.03
    said = board._placement_bullet(rows, {"finished": {right: 5}, "seeds": 5}, moved)
    assert f"`{right}` minus `{wrong}`: **+0.40 [+0.20, +0.60]** over 5 pairs" in said
    assert "(Holm p 0.030, resolved): on this recipe SimAM gains more at `prenorm` than" in said
    # a resolved comparison between two variants counts among the page's resolved ones
    facts = {"train_acc": 84.0, "comparisons": 3, "unverified": 0}
    assert "- 2 of 3 comparisons are resolved" in "\n".join(board._limits(rows, {}, facts))
    assert "- 3 of 3 comparisons are resolved" in "\n".join(
        board._limits(rows, {("a", "b"): moved}, facts)
    )
    before = board._across_families(rows)
    assert "`simam`" in before[0] and "left out" not in before[-1]
    after = board._across_families([*rows, row(right, 1.2)])
    assert "`simam_prenorm`" in after[0] and "`simam`," not in after[0]
    assert f"`{wrong}`, off its paper's position, is left out" in after[-1]
    assert board._step(rows[0]) == "-" and board.full_table(rows, 5)[2].count("| - |") >= 1


def test_the_step_time_bullet_says_where_and_how_idle_the_run_was(board, tmp_path) -> None:
    """The machine and the other work come from the .md bench_steps.py writes beside its CSV; a
    run that shared the machine is called busy, not idle."""
    csv_path = tmp_path / "steps.csv"
    assert board._step_run(board.read_step_md(csv_path)).endswith("(its machine not recorded)")
    head = "# t\n\n- cpu: Some CPU\n- vector extensions: avx2\n\n"
    for cores, word in (("0.03", "idle"), ("1.02", "busy")):
        csv_path.with_suffix(".md").write_text(
            head + f"{board.OTHERS}: {cores} of 2 cores (near 0: idle).\n"
        )
        said = board._step_run(board.read_step_md(csv_path))
        assert said.startswith(f"one {word} run of `benchmarks/bench_steps.py` on Some CPU (avx2)")
        assert said.endswith(f"(other processes: {cores} cores)")
    csv_path.with_suffix(".md").write_text(head + f"{board.OTHERS}: could not be measured\n")
    assert board._step_run(board.read_step_md(csv_path)).endswith("on Some CPU (avx2)")


@pytest.mark.parametrize(
    ("setting", "fmt"),
    [
        (", NCHW memory format", "NCHW memory format"),
        ("", "memory format not recorded"),  # a file bench_steps wrote before it said so
    ],
)
def test_a_regimes_step_sentence_names_the_batch_and_format_its_steps_were_timed_in(
    board, tmp_path, setting, fmt
) -> None:
    """Each table's step column is one bench_steps.py run of that table's own networks: the
    sentence under it gives the batch, image size and memory format from the run's .md
    (Imagenette's 64 at 112 px is not CIFAR's 128 at 32), says where the format was not
    recorded, or says the column was not measured."""
    csv_path = tmp_path / "steps.csv"
    csv_path.with_suffix(".md").write_text(
        f"# t\n\n- cpu: Some CPU\n\nBatch 64 x (3, 112, 112){setting}, 9 rounds of 4 steps, "
        "interleaved.\n"
    )
    found = board.read_step_md(csv_path)
    assert found["batch"] == "64 x (3, 112, 112)"
    timed = board.Row("resnet18h_se", "", "channel", 1e6, 1e8, 1.06, 76.5, 0.5, 5)
    facts = board.step_facts(found)
    said = board._step_sentence([timed], facts)
    assert f"batch 64 x (3, 112, 112), {fmt}, one thread" in said and "on Some CPU" in said
    untimed = board.Row("resnet18h_se", "", "channel", 1e6, 1e8, math.nan, 76.5, 0.5, 5)
    assert board._step_sentence([untimed], facts) == "step time: - (not measured for this table)."


def test_the_step_bullet_says_how_far_the_ratios_move_on_another_cpu(
    board, tmp_path, monkeypatch
) -> None:
    """Files of the same networks on other CPUs: the largest change and its block; a file of
    the same CPU as the column's, or none, says nothing."""
    head = "variant,ratio\n"
    for name, cpu, body in (
        ("amd.csv", "AMD CPU", "resnet20_none,1.0\nresnet20_se,1.08\nresnet20_simam,1.34\n"),
        ("same.csv", "Intel CPU", "resnet20_none,1.0\nresnet20_se,2.0\n"),
    ):
        (tmp_path / name).write_text(head + body)
        (tmp_path / name).with_suffix(".md").write_text(f"- cpu: {cpu}\n")
    monkeypatch.setattr(board, "OTHER_STEPS", (tmp_path / "amd.csv", tmp_path / "same.csv"))
    ours = {"resnet20_none": 1.0, "resnet20_se": 1.13, "resnet20_simam": 1.5}
    said = board._elsewhere(ours, {"cpu": "Intel CPU"})
    assert said == (
        "; the same networks timed earlier, with the code of then, on AMD CPU (`amd.csv`) within "
        "0.16 of these, the most for `simam` (1.34x)"
    )
    monkeypatch.setattr(board, "OTHER_STEPS", (tmp_path / "same.csv",))
    assert board._elsewhere(ours, {"cpu": "Intel CPU"}) == ""


def _copied_results(tmp_path):
    """The committed results folder's results.csv and completion markers (no metrics files,
    no checkpoints), in a folder the test may damage."""
    import shutil

    out = tmp_path / "cifar10_cpu"
    out.mkdir()
    shutil.copy(RESULTS, out / "results.csv")
    for marker in RESULTS.parent.glob("runs/*/seed*/result.json"):
        dest = out / marker.relative_to(RESULTS.parent)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(marker, dest)
    return out


def _edit(path, change) -> None:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0])
    rows = change(rows)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda rows: [*rows, rows[0]], r"line 72: resnet20_none seed 0 is there twice \(line 2"),
        (lambda rows: [{**rows[0], "test/acc": "83.3"}, *rows[1:]], r"line 2, column test/acc"),
        (lambda rows: [{**rows[0], "test/acc": "0.85%"}, *rows[1:]], r"'0.85%' is not a fraction"),
        (lambda rows: [{**rows[0], "variant": "resnet20_typo"}, *rows[1:]], r"resnet20_typo"),
        # probe of round 7: seeds compared as text counted "0.0" and " 0" as a sixth seed
        (lambda rows: [*rows, {**rows[0], "seed": "0.0"}], r"resnet20_none seed 0 is there twice"),
        (lambda rows: [*rows, {**rows[0], "seed": " 0"}], r"resnet20_none seed 0 is there twice"),
        # a copied row with its own run id and seed: no marker says it finished ("71 of 70")
        (
            lambda rows: [*rows, {**rows[0], "run": "resnet20_none/seed7", "seed": "7"}],
            r"run 'resnet20_none/seed7' is no run the sweep plans",
        ),
        (
            lambda rows: [*rows[1:], {**rows[0], "seed": "7"}],
            r"the row says resnet20_none seed '7' for run resnet20_none/seed0",
        ),
    ],
    ids=[
        "duplicate",
        "percent",
        "percent-sign",
        "unknown-variant",
        "seed-as-float",
        "seed-with-space",
        "copied-row",
        "seed-of-another-run",
    ],
)
def test_a_results_file_the_page_would_count_wrong_is_refused_naming_the_row(
    board, tmp_path, change, said
) -> None:
    out = _copied_results(tmp_path)
    _edit(out / "results.csv", change)
    with pytest.raises(ValueError, match=said):
        board.check_results(out, board.load_sweep_file())
    if "twice" in said:  # the command says it too, without a traceback
        assert board.main(["--check", "--results", str(out)]) == 2


def test_a_row_without_a_readable_marker_is_refused(board, tmp_path) -> None:
    """Probe of round 7: the page counted rows the sweep report would leave out."""
    out = _copied_results(tmp_path)
    (out / "runs/resnet20_gc/seed2/result.json").write_text("garbage")
    with pytest.raises(ValueError, match=r"resnet20_gc/seed2 has no readable completion marker"):
        board.check_results(out, board.load_sweep_file())


def test_the_page_counts_what_the_markers_say_not_a_hand_edited_cell(board, tmp_path) -> None:
    out = _copied_results(tmp_path)
    before = {r.variant: r.mean for r in board.build_rows(out, None)[0]}
    out = tmp_path / "edited"  # another folder: build_rows is cached by its arguments
    shutil.copytree(tmp_path / "cifar10_cpu", out)
    _edit(
        out / "results.csv",
        lambda rows: [
            {**r, "test/acc": "0.01"} if r["run"] == "resnet20_se/seed0" else r for r in rows
        ],
    )
    after = {r.variant: r.mean for r in board.build_rows(out, None)[0]}
    assert after == before and len(after) == 14


def test_a_run_trained_off_the_recipe_is_refused(board, tmp_path) -> None:
    """A run with its own limit_train_batches was published as a resolved -74.49 points."""
    import json

    out = _copied_results(tmp_path)
    marker = out / "runs/resnet20_se/seed0/result.json"
    record = json.loads(marker.read_text())
    record["settings"]["trainer.limit_train_batches"] = "2"
    marker.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"resnet20_se/seed0 was trained with other settings"):
        board.check_results(out, board.load_sweep_file())


def _paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, float, int]:
    """Mean paired difference with its 95% t interval, by hand (scipy's t quantile)."""
    diffs = [a[s] - b[s] for s in a if s in b]
    d, n = statistics.fmean(diffs), len(diffs)
    half = stats.t.ppf(0.975, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return d, d - half, d + half, n


def _accuracies_of(path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok":
                out.setdefault(r["variant"], {})[int(r["seed"])] = 100 * float(r["test/acc"])
    return out


def test_what_holds_across_regimes_is_each_tables_results_file(every_table) -> None:
    """Every cell of "What holds across regimes" recomputed from its table's results.csv, and
    its sign column from those figures; the plain network's accuracy at each CIFAR-10
    schedule."""
    board = every_table
    text = board.outputs()[board.PAGE]
    section = text.split("## What holds across regimes", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[1:-3] == [r.title for r in board.REGIMES]
    assert len(lines) > 2, "no comparison resolved in any table"
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        a, _, b = cells[0].replace("`", "").partition(" - ")
        signs, paired = set(), 0
        for regime, cell in zip(board.REGIMES, cells[1:-3], strict=True):
            path = regime.results / "results.csv"
            acc = _accuracies_of(path) if path.is_file() else {}
            left, right = acc.get(regime.prefix + a), acc.get(regime.prefix + b)
            if not left or not right:  # in the sweep's plan and unfinished, or not in it
                planned = {v["name"] for v in yaml.safe_load(regime.sweep.read_text())["variants"]}
                both = {regime.prefix + a, regime.prefix + b} <= planned
                assert cell == ("none finished yet" if both else "not run"), (
                    cells[0],
                    regime.title,
                )
                continue
            pairs = [s for s in left if s in right]
            if len(pairs) == 1:  # a difference, no interval, no say in the sign
                d = left[pairs[0]] - right[pairs[0]]
                assert cell == f"{d:+.2f} (1 pair, no interval)", (cells[0], regime.title)
                continue
            d, low, high, n = _paired(left, right)
            assert f"{d:+.2f} [{low:+.2f}, {high:+.2f}]" in cell and f"({n} pairs)" in cell
            signs.add(d > 0)
            paired += 1
        expected = "one table" if paired < 2 else ("yes" if len(signs) == 1 else "**no: flips**")
        assert cells[-3] == expected, cells[0]
        resolved = sum(c.startswith("**") and "pairs)" in c for c in cells[1:-3])
        assert cells[-2] == f"{resolved} of {paired}", cells[0]  # of the tables with 2+ pairs
        everywhere = "one table" if paired < 2 else ("**yes**" if resolved == paired else "no")
        assert cells[-1] == everywhere, cells[0]
    plain = section.split("The plain ResNet-20 on the CIFAR-10 test set:", 1)[1]
    for regime in board.REGIMES:
        if regime.prefix != board.CIFAR_PREFIX:
            continue
        path = regime.results / "results.csv"
        runs = _accuracies_of(path).get(regime.baseline, {}) if path.is_file() else {}
        seeds = f"{len(runs)} seed{'' if len(runs) == 1 else 's'}"
        said = f"{statistics.fmean(runs.values()):.2f}% ({seeds})" if runs else "not run"
        assert f"{regime.title}: {said}" in plain


def test_the_regimes_picture_is_each_tables_results_file(every_table) -> None:
    """The picture's grid (every comparison of any table, in every table) recomputed from each
    results.csv: Δ and interval by hand, a blank where the table has no pair, resolved cells
    solid and the others fainter; the page and the README link the picture."""
    board = every_table
    tables = board.tables()
    grid = board.regime_grid(tables)
    names = [name for name, _ in grid]
    assert len(names) == len(set(names)) and "gsop - wide_gsop" in names
    for name, cells in grid:
        a, _, b = name.partition(" - ")
        for (regime, *_), r in zip(tables, cells, strict=True):
            acc = _accuracies_of(regime.results / "results.csv")
            left = acc.get(regime.prefix + a, {})
            right = acc.get(regime.prefix + (b or "none"), {})
            pairs = [s for s in left if s in right]
            if not pairs:
                assert r is None, (name, regime.title)
                continue
            assert r.pairs == len(pairs), (name, regime.title)
            if len(pairs) == 1:
                assert r.diff == pytest.approx(left[pairs[0]] - right[pairs[0]], abs=1e-9)
                assert board.cell_state(r) == "one pair"
                continue
            d, low, high, _ = _paired(left, right)
            assert (r.diff, r.low, r.high) == pytest.approx((d, low, high), abs=1e-9)
            assert board.cell_state(r) == ("resolved" if r.holm < 0.05 else "unresolved")
    alpha = board.CELL_ALPHA
    assert alpha["resolved"] > alpha["unresolved"] > alpha["one pair"] > 0
    assert board.regimes_plot(tables).startswith(b"\x89PNG")
    outputs = board.outputs()
    assert f"]({board.REGIMES_PNG})" in outputs[board.PAGE]
    assert f"](docs/{board.REGIMES_PNG})" in outputs[board.README]
    assert (REPO / "docs" / board.REGIMES_PNG).is_file()


def _section(page: str, title: str) -> str:
    """The text of the page's ``## title`` section, up to the next heading of its level."""
    return page.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_longer_rung_says_how_far_its_plain_network_is_from_90_percent_and_why(
    every_table,
) -> None:
    """The plain network's test accuracy on the longer CIFAR-10 rung against 90%: the gap from
    its results.csv, its final training accuracy and epochs from its runs' metrics.csv, and how
    many of its runs read the re-packed copy from their markers."""
    import json

    board = every_table
    regime = next(r for r in board.REGIMES[1:] if r.prefix == board.CIFAR_PREFIX)
    path = regime.results / "results.csv"
    runs = _accuracies_of(path).get(regime.baseline) if path.is_file() else None
    if not runs:
        pytest.skip(f"no finished plain run in {regime.title}")
    text = board.outputs()[board.PAGE]
    section = _section(text, regime.title)
    mean = statistics.fmean(runs.values())
    assert f"scores {mean:.2f}% on the test set" in section
    if mean >= 90:
        assert "at or above 90%" in section
        return
    assert f"{90 - mean:.2f} points short of 90%" in section
    train, epochs, unverified = [], 0, 0
    for seed in runs:
        run = regime.results / "runs" / regime.baseline / f"seed{seed}"
        with next(run.rglob("metrics.csv")).open() as f:
            logged = [r for r in csv.DictReader(f) if r["train/acc"]]
        train.append(100 * float(logged[-1]["train/acc"]))
        epochs = max(epochs, int(logged[-1]["epoch"]) + 1)
    if statistics.fmean(train) < 99:
        assert f"final training accuracy is {statistics.fmean(train):.2f}%" in section
        assert f"{epochs} epochs, {epochs / 164:.0%} of that schedule" in section
    for marker in regime.results.glob("runs/*/seed*/result.json"):
        data = json.loads(marker.read_text())
        unverified += {**data["settings"], **(data.get("execution") or {})}.get(
            "data.verify"
        ) == "false"
    assert (f"{unverified} of " in section) == (unverified > 0)


def test_a_regime_planned_with_fewer_than_five_seeds_says_why(every_table) -> None:
    """Five paired seeds is what the page's other tables have; a sweep that plans fewer says
    on its "Runs:" line why, so that a reader does not take the shorter table for a finished
    one of the same strength."""
    board = every_table
    text = board.outputs()[board.PAGE]
    for regime in board.REGIMES[1:]:
        seeds = len(board.load_sweep_file(regime.sweep).seeds)
        section = _section(text, regime.title)
        runs = next(ln for ln in section.splitlines() if ln.startswith("Runs: "))
        assert f"({seeds} seeds per variant planned" in runs
        if seeds < 5:
            assert regime.seeds_why, f"{regime.title} plans {seeds} seeds and says not why"
            assert f"planned: {regime.seeds_why})" in runs
        else:
            assert runs.endswith(f"({seeds} seeds per variant planned).")


def test_each_regimes_readme_block_is_its_results_file(every_table) -> None:
    """The README blocks of the other regimes: each row's mean ± std and paired interval
    recomputed from that regime's results.csv (or, before its table shows, the count of
    finished runs)."""
    board = every_table
    text = (REPO / "README.md").read_text()
    for regime in board.REGIMES[1:]:
        if not regime.readme:
            continue
        block = text.split(f"<!-- {regime.readme}:start -->", 1)[1].split(
            f"<!-- {regime.readme}:end -->"
        )[0]
        path = regime.results / "results.csv"
        acc = _accuracies_of(path) if path.is_file() else {}
        ok = sum(len(seeds) for seeds in acc.values())
        assert f"{ok} of " in block, regime.title
        lines = [ln for ln in block.splitlines() if ln.startswith("| ")]
        if not lines:
            assert min((len(v) for v in acc.values()), default=0) < regime.readme_seeds
            continue
        rows = {r.label: r.variant for r in board.build_rows(regime.results, None, regime)[0]}
        base = acc[regime.baseline]
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] not in rows:  # a pair's row
                continue
            values = list(acc[rows[cells[0]]].values())
            mean, sd = statistics.fmean(values), statistics.stdev(values)
            assert cells[4] == f"{mean:.2f} ± {sd:.2f}", cells[0]
            if rows[cells[0]] != regime.baseline and len(values) >= 2:
                d, low, high, _ = _paired(acc[rows[cells[0]]], base)
                assert f"{d:+.2f} [{low:+.2f}, {high:+.2f}]" in cells[6], cells[0]


def test_a_table_names_the_split_its_accuracies_are_on(every_table) -> None:
    """Trial of round 7: the Imagenette tables headed their column "test acc (%)", though the
    figures are on the validation images (Imagenette has no test split)."""
    board = every_table
    page = board.outputs()[board.PAGE]
    readme = board.outputs()[board.README]
    for regime in board.REGIMES[1:]:
        text = _section(page, regime.title)
        heads = [ln for ln in text.splitlines() if ln.startswith("| ") and "acc (%)" in ln]
        assert heads and all(f"{regime.split} acc (%)" in h for h in heads), regime.title
        wrong = "test" if regime.split == "val" else "val"
        assert not any(f"{wrong} acc (%)" in h for h in heads), regime.title
        if regime.readme and f"<!-- {regime.readme}:start -->" in readme:
            block = readme.split(f"<!-- {regime.readme}:start -->", 1)[1].split("-->", 1)[0]
            assert f"{wrong} acc (%)" not in block, regime.title
    assert any(r.split == "val" for r in board.REGIMES)


@pytest.mark.parametrize("block", ["gsop", "eca"])
def test_a_blocks_gallery_evidence_is_each_tables_results_file(every_table, block: str) -> None:
    """The gallery page's "On the leaderboard" section, recomputed: each table's paired Δ of the
    block at its position (from results.csv, by hand), named by table."""
    lines = every_table.block_evidence(block)
    found = 0
    for regime in every_table.REGIMES:
        path = regime.results / "results.csv"
        acc = _accuracies_of(path) if path.is_file() else {}
        mine, plain = acc.get(regime.prefix + block), acc.get(regime.baseline)
        if not mine or not plain or len(set(mine) & set(plain)) < 2:
            continue
        d, low, high, n = _paired(mine, plain)
        line = next(ln for ln in lines if ln.startswith(f"- **{regime.title}**"))
        assert f"Δ {d:+.2f} [{low:+.2f}, {high:+.2f}] pp" in line and f"({n} seeds)" in line
        found += 1
    assert found >= 2


def test_a_block_in_no_table_says_so(board) -> None:
    assert board.block_evidence("lambda") == [
        "Not in any table of the [leaderboard](../leaderboard.md) yet."
    ]
