"""Whole-command overhead of the routed model (architecture.md "Performance targets", issue 5).

Usage: python bench/overhead.py [--runs 15]

One run measures, against the loopback stand-in, with commands run alternately so that machine
noise falls on both sides alike:

- whole commands: ``llm -m claude-routed/claude-haiku-4-5 PROMPT`` vs llm-anthropic's
  ``llm -m anthropic/claude-haiku-4-5-20251001 PROMPT``, same prompts, both streamed, both with
  the same two plugins loaded (goal: median routed/direct ratio <= 1.05); the stand-in's request
  log must show exactly one request per command;
- start-up: ``llm --help`` with only llm-accounts loaded vs no plugins at all, through llm's
  ``LLM_LOAD_PLUGINS`` (goal: <= 30 ms more);
- the plugin's own import time (``python -X importtime``), for information;
- connection reuse in one process: 100 prompts in a Python loop on each model, counting the
  connections the stand-in accepted (routed: one pool per process; llm-anthropic: one client per
  prompt), and an ``llm --async`` style batch of 100 concurrent prompts on each, as a wall-time
  ratio routed/direct measured inside the process (start-up excluded).

Goals are judged on wall time (time.perf_counter around subprocess.run); each child's CPU time is
printed beside it as the steadier figure on a busy machine. Nothing here is a test: no timing is
asserted anywhere.

llm-anthropic is the baseline, not a dependency of the project. When this interpreter cannot
import it, the script makes ``.venv-bench/`` at the repo root (``pip install -e '.[bench]'``, with
this interpreter's llm version) and runs itself again there; ``--no-venv`` only says how to
install it instead.

Keys are random strings made at run time, written only to the throwaway llm user directory's
keys.json; they never go on a command line or into a child's environment.
"""

import argparse
import importlib.util
import json
import os
import re
import resource
import secrets
import statistics
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH_VENV = REPO / ".venv-bench"
ROUTED_MODEL = "claude-routed/claude-haiku-4-5"
# llm-anthropic 0.30 registers the dated id (alias claude-haiku-4.5); the stand-in serves both.
DIRECT_MODEL = "anthropic/claude-haiku-4-5-20251001"
ACCOUNTS = (("alpha", "BENCH_ALPHA_KEY"), ("beta", "BENCH_BETA_KEY"))
# Both sides of the whole-command comparison load the same plugins, so the ratio compares what
# each model does per command; what loading llm-accounts costs is the start-up figure's job.
BOTH_PLUGINS = "llm-accounts,llm-anthropic"
RATIO_GOAL = 1.05
STARTUP_GOAL_MS = 30.0
PROMPTS = (
    "Suggest a name for a pelican-themed cafe",
    "Three facts about herons",
    "Write a haiku about a ledger",
    "Explain prompt caching in one sentence",
    "List five birds that can swim",
)


# --- making sure llm-anthropic is there ------------------------------------------------------


def ensure_llm_anthropic(no_venv):
    """Return when llm-anthropic is importable here; otherwise re-run this script in .venv-bench."""
    if importlib.util.find_spec("llm_anthropic") is not None:
        return
    in_bench_venv = Path(sys.prefix).resolve() == BENCH_VENV.resolve()
    if no_venv or in_bench_venv:
        sys.exit(
            "llm-anthropic is not installed in this environment; it is the baseline of this "
            "benchmark.\nInstall it with: pip install llm-anthropic   (or: pip install -e '.[bench]')"
        )
    python = BENCH_VENV / "bin" / "python"
    ready = python.exists() and (
        subprocess.run(
            [str(python), "-c", "import llm_anthropic, llm_accounts"], capture_output=True
        ).returncode
        == 0
    )
    if not ready:
        requirements = ["-e", f"{REPO}[bench]"]
        try:
            from importlib.metadata import version

            # Same llm as the environment we were started from, so the figures are comparable.
            requirements.append(f"llm=={version('llm')}")
        except Exception:
            pass
        print(f"llm-anthropic is not importable here; setting up {BENCH_VENV} (one-off):", flush=True)
        print("  pip install " + " ".join(requirements), flush=True)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        pip = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *requirements], capture_output=True, text=True
        )
        if pip.returncode != 0:
            sys.stderr.write(pip.stdout + pip.stderr)
            sys.exit(f"pip install failed (exit {pip.returncode}); {BENCH_VENV} can be removed and retried")
    print(f"Re-running with {python}\n", flush=True)
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


# --- the throwaway set-up --------------------------------------------------------------------


def make_key():
    alphabet = string.ascii_letters + string.digits
    return "sk-ant-bench-" + "".join(secrets.choice(alphabet) for _ in range(40))


def llm_path():
    return str(Path(sys.executable).parent / "llm")


def base_env():
    """This environment without anything that would point llm or the SDK elsewhere."""
    drop = ("ANTHROPIC_", "LLM_ACCOUNTS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("LLM_LOAD_PLUGINS", None)
    env.pop("LLM_USER_PATH", None)
    return env


def set_up(workdir, keys, base_url):
    """A throwaway llm user directory: two routed accounts and llm-anthropic's key, all in keys.json."""
    user_dir = workdir / "llm"
    user_dir.mkdir(mode=0o700)
    stored = {env_name: keys[name] for name, env_name in ACCOUNTS}
    stored["anthropic"] = keys["alpha"]  # the direct side uses alpha's key
    keys_json = user_dir / "keys.json"
    keys_json.write_text(json.dumps(stored))
    keys_json.chmod(0o600)
    env = base_env()
    env.update(
        LLM_USER_PATH=str(user_dir),
        LLM_ACCOUNTS_BASE_URL=base_url,
        LLM_ACCOUNTS_LEDGER=str(workdir / "ledger.db"),
        # The anthropic SDK reads its base URL from here when llm-anthropic passes base_url=None.
        ANTHROPIC_BASE_URL=base_url,
    )
    accounts_env = dict(env, LLM_LOAD_PLUGINS="llm-accounts")
    for name, env_name in ACCOUNTS:
        run_checked([llm_path(), "accounts", "add", name, "--key-env", env_name, "--budget", "500.00"], accounts_env)
    return dict(env, LLM_LOAD_PLUGINS=BOTH_PLUGINS)


def run_checked(argv, env):
    # stdin closed: llm reads a piped stdin into the prompt.
    completed = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["(no output)"]
        sys.exit(f"FAILED (exit {completed.returncode}): {' '.join(argv[1:3])} ...: {tail[0]}")
    return completed


# --- measuring -------------------------------------------------------------------------------


def timed(argv, env):
    """Wall seconds around subprocess.run, and the child's CPU seconds (user + system).

    Wall time is what the goals are about; CPU time is shown beside it because, on a shared
    machine, it moves far less with load than wall time does.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run_checked(argv, env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def alternate(a, b, runs, measure):
    """``measure(name)`` for a and b, ``runs`` pairs, the side that goes first alternating."""
    samples = {a: [], b: []}
    for i in range(runs):
        for name in (a, b) if i % 2 == 0 else (b, a):
            samples[name].append(measure(name, i))
    return samples


@dataclass
class Comparison:
    """Medians of a vs b; the paired figures compare the two commands of each round."""

    a: list  # [(wall, cpu)]
    b: list

    def median(self, side, field=0):
        return statistics.median(sample[field] for sample in getattr(self, side))

    def low(self, side):
        return min(wall for wall, _ in getattr(self, side))

    def paired_ratio(self):
        return statistics.median(x[0] / y[0] for x, y in zip(self.a, self.b))

    def paired_difference_ms(self, field=0):
        return statistics.median(self.differences_ms(field))

    def differences_ms(self, field=0):
        return [(x[field] - y[field]) * 1000 for x, y in zip(self.a, self.b)]

    def spread_ms(self):
        """The middle half of the paired wall differences: how far apart noise alone puts them."""
        if len(self.a) < 2:
            return "n/a"
        low, _, high = statistics.quantiles(self.differences_ms(), n=4)
        return f"{low:+.0f} to {high:+.0f} ms"


class RequestCheck:
    """Per command, exactly one POST /v1/messages answered 200 must reach the stand-in."""

    def __init__(self, standin):
        self.standin = standin
        self.labels = {"routed": [], "direct": []}
        self.problems = []

    def run(self, side, argv, env):
        before = len(self.standin.requests)
        sample = timed(argv, env)
        new = self.standin.requests[before:]
        if len(new) != 1 or new[0]["path"] != "/v1/messages" or new[0]["status"] != 200:
            seen = [(r["method"], r["path"], r["status"]) for r in new]
            self.problems.append(f"{side}: expected one POST /v1/messages answered 200, saw {seen}")
        else:
            self.labels[side].append(new[0]["label"])
        return sample


def whole_commands(standin, env, runs):
    """``llm -m MODEL PROMPT`` routed vs direct, same prompt in each round, after a warm-up pair."""
    check = RequestCheck(standin)
    models = {"routed": ROUTED_MODEL, "direct": DIRECT_MODEL}

    def command(side, prompt):
        return check.run(side, [llm_path(), "-m", models[side], prompt], env)

    # Unmeasured: the first use creates logs.db and the ledger, and fills the OS caches.
    for side in models:
        command(side, "Warm up")
    check.labels = {"routed": [], "direct": []}
    samples = alternate("routed", "direct", runs, lambda side, i: command(side, PROMPTS[i % len(PROMPTS)]))
    return Comparison(samples["routed"], samples["direct"]), check


def startup(env, runs):
    """``llm --help`` with only llm-accounts loaded vs no plugins (llm's LLM_LOAD_PLUGINS)."""
    variants = {"plugin": "llm-accounts", "bare": ""}
    argv = [llm_path(), "--help"]
    # Unmeasured, and a check that LLM_LOAD_PLUGINS did what we meant.
    for name, plugins in variants.items():
        output = run_checked(argv, dict(env, LLM_LOAD_PLUGINS=plugins)).stdout
        if bool(re.search(r"^\s+accounts\s", output, re.M)) != (name == "plugin"):
            sys.exit(f"LLM_LOAD_PLUGINS={plugins!r} did not give the expected command list")
    samples = alternate("plugin", "bare", runs, lambda name, i: timed(argv, dict(env, LLM_LOAD_PLUGINS=variants[name])))
    return Comparison(samples["plugin"], samples["bare"])


def import_times_ms(env, runs=3):
    """What loading the plugin imports at ``llm --help``, from ``python -X importtime``.

    llm.cli is imported first with no plugins, so the cumulative figures of the two lines
    ``llm_accounts`` (the entry point) and ``llm_accounts.cli`` (register_commands) hold only
    the plugin's own modules, not llm or click. Medians of a few runs, in ms.
    """
    code = "import llm.cli, llm_accounts, llm_accounts.cli"
    samples = {"llm_accounts": [], "llm_accounts.cli": []}
    for _ in range(runs):
        completed = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            env=dict(env, LLM_LOAD_PLUGINS=""), capture_output=True, text=True,
        )
        cumulative = {}
        for line in completed.stderr.splitlines():
            match = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s+(.*)$", line)
            if match:
                cumulative.setdefault(match.group(2).strip(), int(match.group(1)))
        if not samples.keys() <= cumulative.keys():
            return None
        for name in samples:
            samples[name].append(cumulative[name] / 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


# The child that runs many prompts in one process; it prints its own wall time (start-up
# excluded). Keys come from the user directory's keys.json, as for the commands above.
POOL_CHILD = r"""
import asyncio, json, sys, time
import llm
model_id, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "loop":
    model = llm.get_model(model_id)
    start = time.perf_counter()
    for i in range(n):
        model.prompt(f"Loop prompt {i}").text()
else:
    model = llm.get_async_model(model_id)
    async def batch():
        return await asyncio.gather(*(model.prompt(f"Batch prompt {i}").text() for i in range(n)))
    start = time.perf_counter()
    asyncio.run(batch())
print(json.dumps({"wall": time.perf_counter() - start}))
"""


def pool_figures(standin, env, prompts):
    """Connections opened and in-process wall time for ``prompts`` prompts on each side, as a
    loop and as one concurrent async batch."""
    models = {"routed": ROUTED_MODEL, "direct": DIRECT_MODEL}
    out = {}
    for mode in ("loop", "batch"):
        for side in ("routed", "direct"):
            before_connections, before_requests = standin.connections_opened, len(standin.requests)
            completed = run_checked([sys.executable, "-c", POOL_CHILD, models[side], mode, str(prompts)], env)
            answered = sum(1 for r in standin.requests[before_requests:] if r["status"] == 200)
            out[mode, side] = {
                "connections": standin.connections_opened - before_connections,
                "answered": answered,
                "wall": json.loads(completed.stdout.strip().splitlines()[-1])["wall"],
            }
    return out


# --- report ----------------------------------------------------------------------------------


def ms(seconds):
    return f"{seconds * 1000:.0f} ms"


def verdict(met):
    return "met" if met else "NOT met"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="commands per side (default 15)")
    parser.add_argument("--no-venv", action="store_true", help="never create .venv-bench")
    parser.add_argument("--prompts", type=int, default=100, help="prompts per side in the one-process figures (default 100)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    ensure_llm_anthropic(args.no_venv)
    started = time.perf_counter()
    # An installed package has its bytecode; an editable checkout under PYTHONDONTWRITEBYTECODE
    # (set on some machines) would otherwise be compiled again by every command measured.
    import compileall

    compileall.compile_dir(str(REPO / "llm_accounts"), quiet=1)

    from importlib.metadata import version

    from llm_accounts.standin import StandIn

    keys = {name: make_key() for name, _ in ACCOUNTS}
    config = {"keys": [{"label": name, "key": keys[name], "organization": f"org-{name}"} for name, _ in ACCOUNTS]}
    print(
        f"llm {version('llm')}, llm-accounts {version('llm-accounts')}, "
        f"llm-anthropic {version('llm-anthropic')}, anthropic {version('anthropic')}; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.runs} runs per side"
    )
    with tempfile.TemporaryDirectory(prefix="llm-accounts-bench-") as tmp, StandIn(config) as standin:
        env = set_up(Path(tmp), keys, standin.base_url)
        print(f"Stand-in at {standin.base_url}; two routed accounts; llm-anthropic on alpha's key\n")

        whole, check = whole_commands(standin, env, args.runs)
        ratio, extra_ms = whole.paired_ratio(), whole.paired_difference_ms()
        print(f"Whole commands, streamed, both with LLM_LOAD_PLUGINS={BOTH_PLUGINS}")
        for side, model in (("a", ROUTED_MODEL), ("b", DIRECT_MODEL)):
            print(f"  llm -m {model}: median {ms(whole.median(side))} (min {ms(whole.low(side))}), "
                  f"CPU {ms(whole.median(side, 1))}")
        print(f"  routed/direct: median of pairs {ratio:.3f}, of medians "
              f"{whole.median('a') / whole.median('b'):.3f}; routed minus direct: {extra_ms:+.0f} ms wall, "
              f"{whole.paired_difference_ms(1):+.0f} ms CPU (medians of pairs)")
        print(f"  middle half of the paired wall differences: {whole.spread_ms()}")
        for side in ("routed", "direct"):
            labels = check.labels[side]
            spread = ", ".join(f"{n} {labels.count(n)}" for n in sorted(set(labels))) or "none"
            print(f"  request log, {side}: {len(labels)}/{args.runs} commands made exactly one "
                  f"POST /v1/messages, answered 200 ({spread})")
        for problem in check.problems:
            print(f"  PROBLEM: {problem}")

        boot = startup(env, args.runs)
        added_ms = boot.paired_difference_ms()
        print("\nllm --help start-up, LLM_LOAD_PLUGINS=llm-accounts vs LLM_LOAD_PLUGINS=''")
        for side, label in (("a", "with llm-accounts"), ("b", "no plugins")):
            print(f"  {label}: median {ms(boot.median(side))} (min {ms(boot.low(side))}), "
                  f"CPU {ms(boot.median(side, 1))}")
        print(f"  added by the plugin: {added_ms:+.1f} ms wall, {boot.paired_difference_ms(1):+.1f} ms CPU "
              f"(medians of pairs); {(boot.median('a') - boot.median('b')) * 1000:+.1f} ms between wall medians")
        print(f"  middle half of the paired wall differences: {boot.spread_ms()}")
        own = import_times_ms(env)
        if own is not None:
            print(f"  the plugin's own imports (-X importtime, after llm.cli): llm_accounts "
                  f"{own['llm_accounts']:.1f} ms + llm_accounts.cli {own['llm_accounts.cli']:.1f} ms")

        pool = pool_figures(standin, env, args.prompts)
        print(f"\nOne process, {args.prompts} prompts per side (Python API; start-up excluded)")
        for mode, what in (("loop", "a loop of prompts"), ("batch", "one async batch, all concurrent")):
            for side, model in (("routed", ROUTED_MODEL), ("direct", DIRECT_MODEL)):
                figure = pool[mode, side]
                print(f"  {what}, {model}: {figure['connections']} connections for {figure['answered']} answers "
                      f"({figure['connections'] * 100 / max(1, figure['answered']):.0f} per 100 prompts), {ms(figure['wall'])}")
        batch_ratio = pool["batch", "routed"]["wall"] / pool["batch", "direct"]["wall"]
        print(f"  async batch routed/direct wall ratio: {batch_ratio:.3f}")

    requests_ok = not check.problems and all(figure["answered"] == args.prompts for figure in pool.values())
    print("\nSummary (one run on this machine; under load, wall times move by more than these goals)")
    print(f"  whole-command ratio {ratio:.3f}, {extra_ms:+.0f} ms (goal <= {RATIO_GOAL}): {verdict(ratio <= RATIO_GOAL)}")
    print(f"  --help start-up cost {added_ms:+.1f} ms (goal <= {STARTUP_GOAL_MS:.0f} ms): "
          f"{verdict(added_ms <= STARTUP_GOAL_MS)}")
    print(f"  connections per 100 prompts in one process (loop): routed "
          f"{pool['loop', 'routed']['connections'] * 100 / args.prompts:.0f}, llm-anthropic "
          f"{pool['loop', 'direct']['connections'] * 100 / args.prompts:.0f}; async batch ratio {batch_ratio:.3f}")
    print(f"  every command made exactly one request to the stand-in, every prompt answered: {'yes' if requests_ok else 'NO'}")
    print(f"  measured in {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    return 0 if requests_ok else 1


if __name__ == "__main__":
    sys.exit(main())
