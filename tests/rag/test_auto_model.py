"""`generator.engine.model: auto`: the decision rule on given measurements, the speed cache keyed by
machine, one real probe, the config keys, and what `rag models list` prints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from inference.catalog import CATALOG, find_entry
from rag.generation.auto_model import PIN_ENV, choose, decide, resolve_config_model
from rag.generation.machine import Machine, this_machine
from rag.generation.speed import ANSWER_TOKENS, PROMPT_TOKENS, Speed, SpeedCache
from rag.generation.speed_probe import ProbeError, probe
from rag.generation.speed_report import estimates

SIZES = [(e.name, e.size) for e in CATALOG]  # smollm2 < qwen2.5-0.5b < qwen2.5-1.5b
MACHINE = Machine(cpu="Test CPU 9000", flags=("avx2", "fma"), kernel_isa="avx2", threads=2)


@pytest.fixture
def unpinned(monkeypatch):
    monkeypatch.delenv(PIN_ENV, raising=False)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch, unpinned) -> Path:
    """An empty model cache in which `installed` models are sparse files of the catalogued size
    (`installed()` checks the size only): listing and deciding never read them."""
    root = tmp_path / "models"
    monkeypatch.setenv("RAG_CACHE_DIR", str(root))
    return root


def fake_install(root: Path, *names: str) -> None:
    for n in names:
        e = find_entry(n)
        p = root / "packaged" / e.filename
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as f:
            f.truncate(e.size)


# ---- the rule --------------------------------------------------------------------------------------

def test_largest_model_within_budget_wins():
    c = decide(SIZES, {"qwen2.5-1.5b": 4.1, "qwen2.5-0.5b": 1.9, "smollm2": 0.3}, 6)
    assert c.name == "qwen2.5-1.5b" and c.reason.startswith("qwen2.5-1.5b: 4.1 s ≤ budget 6 s")
    c = decide(SIZES, {"qwen2.5-1.5b": 11.0, "qwen2.5-0.5b": 4.0, "smollm2": 0.3}, 6)
    assert c.name == "qwen2.5-0.5b" and c.reason == "qwen2.5-0.5b: 4.0 s ≤ budget 6 s; qwen2.5-1.5b: 11.0 s > budget"


def test_over_budget_takes_the_smallest_and_never_smollm2_when_others_exist():
    c = decide(SIZES, {"qwen2.5-1.5b": 20.0, "qwen2.5-0.5b": 8.0, "smollm2": 0.5}, 6)
    assert c.name == "qwen2.5-0.5b" and "no model meets the budget 6 s" in c.reason
    # measured on shared cores the order can invert; the smaller model is still the faster one
    assert decide(SIZES, {"qwen2.5-1.5b": 9.3, "qwen2.5-0.5b": 27.8}, 6).name == "qwen2.5-0.5b"


def test_static_rule_without_measurements():
    c = decide(SIZES, {}, 6)
    assert c.name == "qwen2.5-0.5b" and "static rule" in c.reason
    # a measured fit beats an unmeasured bigger model: only measurements may claim speed
    assert decide(SIZES, {"qwen2.5-0.5b": 3.0}, 6).name == "qwen2.5-0.5b"


def test_smollm2_only_when_nothing_else_is_installed():
    c = decide([("smollm2", 98362432)], {}, 6)
    assert c.name == "smollm2" and "nothing else is installed" in c.reason
    assert decide([], {}, 6).name is None


def test_seconds_per_answer_and_estimates():
    s = Speed(prefill_s=0.9, decode_s=0.05, prompt_tokens=PROMPT_TOKENS // 2)
    assert s.seconds_per_answer == pytest.approx(1.8 + (ANSWER_TOKENS - 1) * 0.05)
    sizes = dict(SIZES)
    est = estimates({"qwen2.5-0.5b": 4.0, "qwen2.5-1.5b": None, "smollm2": None}, sizes)
    assert est["qwen2.5-1.5b"] == pytest.approx(4.0 * sizes["qwen2.5-1.5b"] / sizes["qwen2.5-0.5b"])


def test_the_pipeline_figure_decides_not_the_prompt_alone():
    """Catches auto choosing from the prompt-only estimate when the answer step was timed: the 1.5B's
    900-token prompt + 24 tokens fits 6 s (3 + 23 x 0.1 = 5.3 s) but its questions took 7.5 s p50 with
    the checks and the gate, so the 0.5B (4.2 s per question) is the pick."""
    big = Speed(prefill_s=3.0, decode_s=0.1, question_s=7.5, work={"mode": "long", "gate": True})
    small = Speed(prefill_s=1.0, decode_s=0.04, question_s=4.2)
    assert Speed(prefill_s=3.0, decode_s=0.1).seconds_per_answer == pytest.approx(5.3)
    assert big.seconds_per_answer == 7.5
    c = decide(SIZES, {"qwen2.5-1.5b": big.seconds_per_answer, "qwen2.5-0.5b": small.seconds_per_answer}, 6)
    assert c.name == "qwen2.5-0.5b" and c.reason == "qwen2.5-0.5b: 4.2 s ≤ budget 6 s; qwen2.5-1.5b: 7.5 s > budget"


def test_describe_work_says_what_a_question_ran():
    """Catches a why line that hides the gate, the per-passage spans or a probe question that refused
    (a refused question skips the long answer, so its time under-counts)."""
    from rag.generation.speed_report import describe_work

    w = {"mode": "long", "gate": True, "per_passage": 5, "checks": ["check_passage", "check_answer"],
         "prompt_tokens": 2310, "generated_tokens": 96, "questions": 3, "refused": False}
    assert describe_work(w) == ("long answer after the short-answer gate (5 passage spans, checks), 2310 prompt "
                                "tokens computed + 96 generated, p50 of 3 questions")
    assert describe_work({**w, "refused": True}).endswith("(it refused: under-counted)")
    assert describe_work({"mode": "short", "per_passage": 0, "checks": [], "prompt_tokens": 900,
                          "generated_tokens": 5, "questions": 3}).startswith("short answer, 900 prompt tokens")


def test_pipeline_key_follows_the_per_question_work_not_the_budget(tmp_path):
    """Catches a measurement reused for a config that makes each question cost more (another mode,
    more passages, checks switched on by a local calibration, the long prompt computing its passages
    again) or by a probe that asks another question, or re-taken for a budget change."""
    from rag.config import load_config
    from rag.generation.machine import pipeline_key

    base = [f"storage.path={tmp_path}"]
    key = pipeline_key(load_config(None, base))
    assert pipeline_key(load_config(None, [*base, "answer.latency_budget_s=12"])) == key
    assert pipeline_key(load_config(None, [*base, "generator.engine.model=qwen2.5-0.5b"])) == key  # in Machine
    for change in ("answer.mode=short", "answer.context_k=8", "answer.verify=false", "answer.long_grounding=off",
                   "answer.long_passage_kv=own", "generator.sampling.max_tokens=256"):
        assert pipeline_key(load_config(None, [*base, change])) != key, change
    import rag.generation.machine as machine  # a new probe version (what its question runs): a new measurement

    version = machine.PROBE_VERSION
    try:
        machine.PROBE_VERSION = version + 1
        assert pipeline_key(load_config(None, base)) != key
    finally:
        machine.PROBE_VERSION = version
    (tmp_path / "calibration.json").write_text("{}", encoding="utf-8")
    assert pipeline_key(load_config(None, base)) != key
    engine = load_config(None, base).generator.engine
    assert this_machine(engine, load_config(None, base)).key("x") != this_machine(engine).key("x")


def test_probe_questions_differ_and_hold_their_answer():
    """Catches probe questions that share passages (the prefix cache would serve the timed ones from the
    warm-up and under-count) or whose answer is not in a passage (the gate would refuse and skip the
    long answer)."""
    from rag.generation.pipeline_probe import probe_question

    (q1, p1), (q2, p2) = probe_question(1, 5), probe_question(2, 5)
    assert len(p1) == 5 and q1 != q2 and not set(p1) & set(p2)
    # each names its town within its first words (a prefix-cache block is 16 tokens: it never matches)
    assert all("Ostrava" in " ".join(p.split()[:6]) for p in p1)
    assert "Kelmoor harbour has 54 moorings" in p2[0] and "Kelmoor" in q2


# ---- the cache, keyed by machine -------------------------------------------------------------------

def test_cache_is_keyed_by_cpu_and_a_new_cpu_is_measured_again(cache_dir):
    fake_install(cache_dir, "qwen2.5-0.5b")
    cache = SpeedCache()
    probes: list[tuple[str, Machine]] = []

    def given(model: str, machine: Machine) -> Speed:  # the measurement this test gives
        probes.append((model, machine))
        return Speed(prefill_s=2.0, decode_s=0.1)

    entry = find_entry("qwen2.5-0.5b")
    cache.put(entry, MACHINE, Speed(prefill_s=1.0, decode_s=0.1))
    lines: list[str] = []
    c = choose(None, 6, cache=cache, machine=MACHINE, run_probe=given, log=lines.append)
    assert (c.name, probes, lines) == ("qwen2.5-0.5b", [], [])  # cached: nothing measured, nothing said
    other = replace(MACHINE, cpu="Other CPU 1000")
    assert cache.get(entry, other) is None
    for m in (other, replace(MACHINE, kernel_isa="avx512"), replace(MACHINE, threads=8)):
        choose(None, 6, cache=cache, machine=m, run_probe=given, log=lines.append)
    assert [m for _, m in probes] == [other, replace(MACHINE, kernel_isa="avx512"), replace(MACHINE, threads=8)]
    assert len(lines) == 3 and "measuring qwen2.5-0.5b on this CPU once" in lines[0]
    assert cache.get(entry, other).prefill_s == 2.0 and cache.get(entry, MACHINE).prefill_s == 1.0  # both kept
    choose(None, 6, cache=cache, machine=other, run_probe=given, log=lines.append)
    assert len(probes) == 3  # measured once per machine
    saved = json.loads((cache_dir / "speed.json").read_text())
    assert {r["cpu"] for r in saved.values()} == {"Test CPU 9000", "Other CPU 1000"}


def test_measures_largest_first_and_stops_at_the_first_fit(cache_dir):
    fake_install(cache_dir, "qwen2.5-0.5b", "qwen2.5-1.5b")
    order: list[str] = []

    def given(model: str, machine: Machine) -> Speed:
        order.append(model)
        return Speed(prefill_s=3.0, decode_s=0.1) if model == "qwen2.5-1.5b" else Speed(1.0, 0.05)

    c = choose(None, 6, cache=SpeedCache(), machine=MACHINE, run_probe=given, log=lambda _: None)
    assert order == ["qwen2.5-1.5b"] and c.name == "qwen2.5-1.5b"  # 3 + 23 * 0.1 = 5.3 s fits
    c = choose(None, 4, cache=SpeedCache(), machine=MACHINE, run_probe=given, log=lambda _: None)
    assert order == ["qwen2.5-1.5b", "qwen2.5-0.5b"] and c.name == "qwen2.5-0.5b"


def test_a_failed_probe_falls_back_to_the_static_rule(cache_dir):
    fake_install(cache_dir, "qwen2.5-0.5b", "qwen2.5-1.5b")

    def broken(model: str, machine: Machine) -> Speed:
        raise ProbeError(f"speed probe of {model} failed: out of memory")

    lines: list[str] = []
    c = choose(None, 6, cache=SpeedCache(), machine=MACHINE, run_probe=broken, log=lines.append)
    assert c.name == "qwen2.5-0.5b" and "static rule" in c.reason
    assert any("out of memory" in ln for ln in lines)


def test_real_probe_measures_the_engine():
    """The subprocess probe on the real engine (SmolLM2, a short prompt): positive times."""
    from rag.config import RagConfig

    s = probe("smollm2", this_machine(RagConfig().generator.engine), prompt_tokens=64, decode_tokens=4, repeats=2,
              timeout_s=300)
    assert s.prompt_tokens == 64 and s.prefill_s > 0 and s.decode_s > 0
    assert s.seconds_per_answer > s.prefill_s
    assert s.question_s is None and s.work is None


def test_real_pipeline_probe_times_the_answer_step(tmp_path):
    """The pipeline probe on the real engine (SmolLM2, 2 passages, long mode): a per-question time
    that is the figure auto compares, and the engine's token accounting of that question. Catches a
    probe that times only the prompt (no generated tokens or sentences counted) or reads the user's
    store (its storage is a temp dir: nothing is written under storage.path)."""
    from rag.config import load_config

    cfg = load_config(None, [f"storage.path={tmp_path / 'user'}", "answer.context_k=2",
                             "generator.sampling.max_tokens=32", "generator.engine.max_model_len=1024",
                             "generator.engine.kv_cache_memory=0.5"])
    s = probe("smollm2", this_machine(cfg.generator.engine, cfg), repeats=1, timeout_s=300, config=cfg)
    assert s.question_s is not None and s.question_s > 0 and s.seconds_per_answer == s.question_s
    w = s.work
    assert w["mode"] == "long" and w["questions"] == 1 and not w["gate"]  # SmolLM2 is uncalibrated: no gate
    assert w["prompt_tokens"] > 300 and w["generated_tokens"] > 0 and w["sentences"] >= 1
    assert not (tmp_path / "user").exists()


# ---- config and resolution -------------------------------------------------------------------------

def test_config_default_is_auto_and_the_budget_is_validated():
    from rag.config import RagConfig, load_config
    from rag.config_loader import ConfigError

    cfg = RagConfig()
    assert cfg.generator.engine.model == "auto" and cfg.answer.latency_budget_s == 6
    assert load_config(None, ["answer.latency_budget_s=2.5"]).answer.latency_budget_s == 2.5
    with pytest.raises(ConfigError, match="latency_budget_s"):
        load_config(None, ["answer.latency_budget_s=0"])


def test_resolution_replaces_auto_once(monkeypatch):
    from rag.config import load_config

    monkeypatch.setenv(PIN_ENV, "smollm2")
    cfg = load_config(None)
    assert resolve_config_model(cfg) == "smollm2" and cfg.generator.engine.model == "smollm2"
    pinned = load_config(None, ["generator.engine.model=qwen2.5-0.5b"])
    assert resolve_config_model(pinned) == "qwen2.5-0.5b"  # an explicit model is never replaced


# ---- rag models list -------------------------------------------------------------------------------

def _measured(cache_dir: Path, seconds: dict[str, float], work: dict | None = None) -> None:
    """Cache measurements for the default config's answer step on this machine (what `rag models
    list` reads): prompt-only figures, or with `work` the pipeline probe's per-question seconds."""
    from rag.config import RagConfig

    cfg = RagConfig()
    machine = this_machine(cfg.generator.engine, cfg)
    cache = SpeedCache(cache_dir / "speed.json")
    for name, s in seconds.items():
        speed = Speed(prefill_s=s - (ANSWER_TOKENS - 1) * 0.05, decode_s=0.05) if work is None else \
            Speed(prefill_s=1.0, decode_s=0.05, question_s=s, work=work)
        cache.put(find_entry(name), machine, speed)


def test_models_list_marks_the_auto_choice_and_why(cache_dir, capsys):
    from rag.cli import main

    fake_install(cache_dir, "qwen2.5-0.5b", "qwen2.5-1.5b")
    _measured(cache_dir, {"qwen2.5-0.5b": 4.1, "qwen2.5-1.5b": 11.0})
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    line = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("qwen", "smollm2"))}
    assert "4.1 s" in line["qwen2.5-0.5b"] and "<-" in line["qwen2.5-0.5b"]
    assert "11.0 s" in line["qwen2.5-1.5b"] and "<-" not in line["qwen2.5-1.5b"]
    assert "auto → qwen2.5-0.5b: 4.1 s ≤ budget 6 s; qwen2.5-1.5b: 11.0 s > budget" in out
    assert "smollm2 is for tests and compression" in out
    assert main(["models", "list", "--json", "--set", "answer.latency_budget_s=12"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["auto"]["model"] == "qwen2.5-1.5b" and data["auto"]["budget_s"] == 12
    rows = {r["name"]: r for r in data["models"]}
    assert rows["qwen2.5-1.5b"]["auto"] and rows["qwen2.5-1.5b"]["speed"] == "measured"


def test_models_list_shows_the_per_question_figure_and_what_it_ran(cache_dir, capsys):
    """Catches `rag models list` showing the prompt-only figure, or not saying why, when the answer
    step was timed."""
    from rag.cli import main

    fake_install(cache_dir, "qwen2.5-0.5b", "qwen2.5-1.5b")
    work = {"mode": "long", "gate": True, "per_passage": 5, "checks": ["check_passage"], "prompt_tokens": 2400,
            "generated_tokens": 90, "questions": 3, "refused": False}
    _measured(cache_dir, {"qwen2.5-0.5b": 4.4, "qwen2.5-1.5b": 9.7}, work)
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "auto → qwen2.5-0.5b: 4.4 s ≤ budget 6 s; qwen2.5-1.5b: 9.7 s > budget" in out
    assert ("qwen2.5-1.5b: 9.7 s per question = long answer after the short-answer gate (5 passage spans, checks), "
            "2400 prompt tokens computed + 90 generated, p50 of 3 questions") in out
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows["qwen2.5-1.5b"]["work"] == work and rows["qwen2.5-1.5b"]["why"].startswith("long answer")


def test_models_list_estimates_unmeasured_and_names_missing(cache_dir, capsys):
    from rag.cli import main

    fake_install(cache_dir, "qwen2.5-0.5b")
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "auto → qwen2.5-0.5b: not measured yet, static rule" in out and "qwen2.5-1.5b not installed" in out
    assert "auto is not used" not in out
    assert main(["models", "list", "--set", "generator.engine.model=smollm2"]) == 0
    assert "names generator.engine.model=smollm2: auto is not used" in capsys.readouterr().out
    fake_install(cache_dir, "qwen2.5-1.5b")
    _measured(cache_dir, {"qwen2.5-0.5b": 3.0})
    assert main(["models", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    assert rows["qwen2.5-1.5b"]["speed"] == "estimated" and rows["qwen2.5-1.5b"]["seconds_per_answer"] > 6
    assert rows["qwen2.5-0.5b"]["auto"]  # an estimate never claims the budget: 0.5B is the measured fit


def test_a_busy_machine_measurement_is_flagged_and_measured_again_on_request(cache_dir, capsys):
    """A probe that got a fraction of its threads' CPU (other processes on the cores) is kept, since it
    is what answers took then, but flagged, and `--measure` takes it again."""
    from rag.cli import main
    from rag.config import RagConfig

    fake_install(cache_dir, "qwen2.5-0.5b")
    entry, cache = find_entry("qwen2.5-0.5b"), SpeedCache()
    busy = Speed(prefill_s=12.0, decode_s=0.25, cpu_share=0.3)
    assert busy.contended and not Speed(4.0, 0.08, cpu_share=0.9).contended and not Speed(4.0, 0.08).contended
    # spinning threads keep the CPU share high on shared cores: the load before the probe tells
    assert Speed(4.0, 0.08, cpu_share=0.9, others_load=1.5, cores=2).contended
    assert not Speed(4.0, 0.08, cpu_share=0.9, others_load=0.3, cores=2).contended
    cache.put(entry, MACHINE, busy)
    calls: list[str] = []

    def given(model: str, machine: Machine) -> Speed:
        calls.append(model)
        return Speed(prefill_s=4.0, decode_s=0.08, cpu_share=0.95)

    c = choose(None, 6, cache=cache, machine=MACHINE, run_probe=given, log=lambda _: None)
    assert calls == [] and c.contended == ["qwen2.5-0.5b"]  # an answer never waits for a re-measure
    c = choose(None, 6, cache=cache, machine=MACHINE, run_probe=given, log=lambda _: None, remeasure_contended=True)
    assert calls == ["qwen2.5-0.5b"] and c.contended == [] and c.reason.startswith("qwen2.5-0.5b: 5.8 s ≤ budget")
    cache.put(entry, this_machine(RagConfig().generator.engine, RagConfig()), busy)
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "17.8 s!" in out and "measured while other processes kept the CPU busy" in out


def test_predicted_kernel_isa_names_the_library_paths(monkeypatch):
    """Catches the speed cache's machine key naming a path the kernel library never picks for those
    flags (an AVX-VNNI laptop keyed as plain AVX2 would share the slower path's measurements)."""
    from rag.generation.machine import predicted_kernel_isa

    monkeypatch.delenv("RAG_KERNEL_ISA", raising=False)
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    assert predicted_kernel_isa(frozenset({"avx2", "fma"})) == "avx2"
    assert predicted_kernel_isa(frozenset({"avx2", "fma", "avx_vnni"})) == "avxvnni"
    assert predicted_kernel_isa(frozenset({"avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                                           "avx512_vnni"})) == "avx512"
    assert predicted_kernel_isa(frozenset({"sse4_2"})) == "scalar"
    # AMX CPUs run the tile path (session 43 found an AMX Xeon's measurements keyed as avx512)
    amx = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_tile", "amx_int8"}
    monkeypatch.setattr("sys.platform", "linux")
    assert predicted_kernel_isa(frozenset(amx)) == "amx"
    assert predicted_kernel_isa(frozenset(amx - {"amx_int8"})) == "avx512"
    monkeypatch.setenv("RAG_KERNEL_ISA", "avx2")
    assert predicted_kernel_isa(frozenset(amx)) == "avx2"
