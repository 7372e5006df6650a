"""Configuration never reaches the shell as shell syntax: values are quoted (``{x:q}``, shlex), a
recipe's ``ncu.kernel_regex`` is compiled when the config is read, ``work_dir`` is checked, and the
pipeline runs from a folder whose path holds a space (with a Python whose path holds one too)."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import REPO
import snakemake_forks



def _snakemake(args, cwd=REPO, timeout=300):
    return snakemake_forks.run(args, cwd, timeout=timeout)


def _configfile(tmp_path, text: str) -> str:
    path = tmp_path / "extra.yaml"
    path.write_text(text)
    return str(path)


def test_a_quote_in_the_kernel_regex_stays_one_argument(tmp_path):
    """A single quote in a recipe's kernel_regex ran a command (issue 20): now it is part of ncu's -k."""
    marker = tmp_path / "PWNED"
    regex = f"get_acceleration' ; touch {marker} ; echo '"
    extra = _configfile(tmp_path, "workloads:\n  warp_sph:\n    ncu:\n      kernel_regex: " + repr(regex) + "\n")
    target = "results/captures/warp_sph/baseline/n62500/ncu.ncu-rep"
    r = _snakemake(["-n", "-p", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", target])
    assert r.returncode == 0, r.stderr[-1500:]
    [command] = [line.removeprefix("Shell command: ") for line in r.stdout.splitlines()
                 if "ncu-run.json" in line and " -k " in line]
    words = shlex.split(command)
    assert words[words.index("-k") + 1] == f"regex:{regex}"
    assert not marker.exists()


def test_an_invalid_kernel_regex_is_refused_when_the_config_is_read(tmp_path):
    extra = _configfile(tmp_path, "workloads:\n  warp_sph:\n    ncu:\n      kernel_regex: 'get_(acceleration'\n")
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", "rebuild_reports"])
    assert r.returncode != 0
    assert "workloads.warp_sph.ncu.kernel_regex" in r.stdout + r.stderr and "not a regular expression" in r.stdout + r.stderr


def test_an_unknown_variant_is_refused_under_the_key_that_names_it(tmp_path):
    extra = _configfile(tmp_path, "workloads:\n  cupy_sqdiff:\n    l2_modes: {sizes: [1024], variants: [fusd]}\n")
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", "rebuild_reports"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "workloads.cupy_sqdiff.l2_modes.variants: no variant 'fusd'" in out, out[-1500:]


@pytest.mark.parametrize("extra,says", [
    # a profile that moves JAX to other sizes but keeps the default's variant_sizes (512 for the int32 steps)
    ("workloads:\n  jax_matmul:\n    sizes: [2048]\n    ncu: {sizes: [2048], variants: [bf16]}\n",
     "workloads.jax_matmul.variant_sizes.baseline: [512] names none of the sizes [2048]"),
    # ncu asked for a step that does not run at the ncu size
    ("workloads:\n  jax_matmul:\n    ncu: {variants: [jit, bf16]}\n",
     "workloads.jax_matmul.ncu.variants: 'jit' runs at none of ncu.sizes [8192]"),
])
def test_a_step_the_sizes_leave_out_is_refused_when_the_config_is_read(tmp_path, extra, says):
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", _configfile(tmp_path, extra), "--",
                    "rebuild_reports"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and says in out, out[-1500:]


@pytest.mark.parametrize("work_dir,says", [("//", "filesystem root"), ("~/results", "~"), ("a//b", "empty component"),
                                           ("../outside", "not inside the repository"), ("/", "")])
def test_an_unsafe_work_dir_is_refused(work_dir, says):
    r = _snakemake(["-n", "--cores", "1", "rebuild_reports", "--config", f"work_dir={work_dir}"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "work_dir" in out and says in out, out[-1500:]


@pytest.fixture(scope="module")
def spaced_copy(tmp_path_factory):
    """The repository's tracked files in a folder with a space, and a Python behind a path with one."""
    root = tmp_path_factory.mktemp("spaced") / "cook book"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src, dst = REPO / rel, root / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    python = root.parent / "py thon" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    return root, python


def test_the_dry_run_and_a_cpu_rule_work_from_a_folder_with_a_space(spaced_copy):
    root, python = spaced_copy
    config = ["--config", f"python={python}"]
    r = _snakemake(["-n", "--cores", "1", "rebuild_reports", *config], cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    target = "results/analysis/reference/numba_ufunc/baseline/n268435456.json"
    r = _snakemake(["--cores", "1", target, *config], cwd=root, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (root / target).read_text().startswith("{")


# --- every config value that can hold text, hostile, through every rule's dry-run command ----------

#: the targets whose dry run schedules every rule with a shell command: the suite, the reference rebuild,
#: the reference copy, a comparison, a kernel page, and the rules a checkpoint hides in a dry run (named by file)
WALK_TARGETS = ["profile_all", "rebuild_reports", "capture_reference", "compare", "kernel_page",
                "{work}/captures/warp_sph/baseline/n62500/ncu.ncu-rep", "{work}/captures/warp_sph/baseline/n62500/ncu-raw.csv",
                "{work}/captures/cupy_sqdiff/l2/baseline/n1024/timing-cold-l2.json",
                "{work}/captures/nvtx_multiprocess/nsys.sqlite"]
#: rules with no shell command of their own
NO_SHELL = {"profile_all", "rebuild_kernel_pages", "kernel_page"}
#: keys whose value names something of the suite (a workload, a variant): a hostile one is refused
REFUSED_NAMES = {"kernel_workload", "kernel_variant", "only_workloads.[]", "workloads.*.l2_modes.variants.[]",
                 "workloads.*.coldwarm_variants.[]", "workloads.*.coldwarm_driver_cache_variant",
                 "workloads.*.timed_first.[]", "workloads.*.ncu.variants.[]", "workloads.*.ncu.full_variants.[]"}


#: the path patterns the schema gives config files (more_references' values): still free text
_FILE_PATTERNS = (None, "\\.ya?ml$")


def _string_keys(schema, keep, path=()):
    """Every key of the config schema whose value (or item) is a string and whose schema ``keep`` accepts."""
    kinds = schema.get("type") if isinstance(schema.get("type"), list) else [schema.get("type")]
    for name, sub in (schema.get("properties") or {}).items():
        yield from _string_keys(sub, keep, (*path, name))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _string_keys(schema["additionalProperties"], keep, (*path, "*"))
    if "items" in schema:
        yield from _string_keys(schema["items"], keep, (*path, "[]"))
    if "string" in kinds and keep(schema):
        yield ".".join(path)


def _text_keys(schema):
    """Every key of the config schema whose value (or item) is free text: no enum, no pattern."""
    return _string_keys(schema, lambda s: "enum" not in s and s.get("pattern") in _FILE_PATTERNS)


def _hostile(key: str, marker) -> str:
    """Quotes of both kinds, $( ), backticks, ;, spaces and a newline: split, run or cut short unless quoted."""
    return f"x{key.replace('.', '_').replace('*', 'any').replace('[]', 'item')}'q\"d $(touch {marker}) `touch {marker}`; touch {marker}\nend"


def _set(config: dict, key: str, value) -> None:
    """Put ``value`` at ``key`` (a schema path: * is the first workload, [] a one-item list) in ``config``."""
    *parents, last = key.split(".")
    node = config
    for part in parents:
        if part == "*":
            part = "warp_sph" if "workloads" in key else "hostile"
        if part == "[]":
            continue
        node = node.setdefault(part, {}) if not isinstance(node.get(part), list) else node[part][0]
    if last == "[]":
        raise AssertionError("a list of text sits under a named key")
    node[last] = value


def _quote_states(command: str):
    """(character, quoted) for each character of ``command`` as bash reads it outside $( ): quoted is
    True inside single quotes, where $( ), backticks and ; are plain text."""
    state, i = None, 0
    while i < len(command):
        c = command[i]
        if state == "'":
            if c == "'":
                state = None
            yield c, True
        elif c == "\\" and state is None:
            yield c, False
            i += 1
            if i < len(command):
                yield command[i], True
        elif c == "'" and state is None:
            state = "'"
            yield c, True
        elif c == '"':
            state = None if state == '"' else '"' if state is None else state
            yield c, False
        else:
            yield c, False
        i += 1


def _dry_run_commands(tmp_path, values: dict):
    """The dry run of WALK_TARGETS with each config key of ``values`` set to its value (the rest as
    rules/config.yaml has them)."""
    import yaml

    config = {"compare_base": "ref base", "compare_cand": "ref cand", "kernel_workload": "warp_sph",
              "kernel_variant": "baseline", "kernel_name": "get_acceleration", "work_dir": "results"}
    if any(key.split(".")[0] in ("reference", "workloads", "nsys_profile", "ncu_profile", "cluster", "more_references")
           for key in values):
        base = yaml.safe_load((REPO / "rules" / "config.yaml").read_text())
        for top in ("reference", "workloads", "nsys_profile", "ncu_profile", "cluster"):
            config[top] = base[top]
    for key, value in values.items():
        if key.endswith(".[]"):
            _set(config, key.removesuffix(".[]"), [value])
        elif key.startswith("more_references."):
            config["more_references"] = {"hostile": value + ".yaml"}
        elif key == "nsys_profile.extra_args" or key == "ncu_profile.extra_args":
            _set(config, key, shlex.quote(value))  # split as a shell would: one argument
        else:
            _set(config, key, value)
    extra = tmp_path / "hostile.yaml"
    extra.write_text(yaml.safe_dump(config, allow_unicode=True))
    targets = [t.format(work=config["work_dir"]) for t in WALK_TARGETS]
    r = _snakemake(["-n", "-p", "--cores", "1", "--configfile", "rules/config.yaml", str(extra), "--", *targets],
                   timeout=600)
    return r, config


def _shell_commands(stdout: str) -> list[tuple[str, str]]:
    """(rule, command) of each shell command a dry run with -p printed."""
    commands = []
    rule = None
    lines = stdout.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("rule ", "checkpoint ")):
            rule = line.split()[1].rstrip(":")
        if line.startswith("Shell command: "):
            # a newline of a quoted value continues the command on the next printed line
            text = line.removeprefix("Shell command: ")
            while True:
                try:
                    shlex.split(text)
                    break
                except ValueError:
                    i += 1
                    text += "\n" + lines[i]
            commands.append((rule, text))
        i += 1
    return commands


@pytest.fixture(scope="module")
def rules_with_shell():
    r = _snakemake(["--list-rules"])
    names = {line.split()[0] for line in r.stdout.splitlines() if line and not line.startswith(" ")}
    return names - NO_SHELL


_COVERED: set = set()

#: every config key that can hold text
TEXT_KEYS = sorted(set(_text_keys(__import__("yaml").safe_load(
    (REPO / "rules" / "schemas" / "config.schema.yaml").read_text()))))


def _hostile_value(tmp_path, key: str) -> str:
    """``key``'s hostile value, whose commands would touch ``tmp_path``/PWNED if the shell ran any of it."""
    if key == "reference.dir":
        # the committed reference under a hostile name (one path component: a marker without a
        # slash), so that the rules reading it are scheduled
        value = _hostile(key, "PWNED")
        (tmp_path / value).symlink_to(REPO / "reports" / "reference" / "h200", target_is_directory=True)
        return str(tmp_path / value)
    return _hostile(key, tmp_path / "PWNED")


#: keys whose hostile value changes what the walk schedules (a reference folder under another name
#: has no kernel pages to check): set in a dry run of their own, so that they hide no command that
#: holds another key's value
SCHEDULE_KEYS = ("reference.dir", "reference.gpu_jobs")


@pytest.fixture(scope="module")
def hostile_walk(tmp_path_factory):
    """key -> (its value, the dry run, its shell commands, whether the run set SCHEDULE_KEYS): two dry
    runs, each with its accepted text keys hostile at once. Each value names its key, so each test
    finds its own value's commands, and a value a command split or ran is caught in that command
    whatever the others hold. The keys that name a workload or variant are refused, each in a run
    of its own (the first refusal would hide the next)."""
    walks = {}
    for scheduling in (False, True):
        tmp_path = tmp_path_factory.mktemp("hostile")
        values = {key: _hostile_value(tmp_path, key) for key in TEXT_KEYS
                  if key not in REFUSED_NAMES and (key in SCHEDULE_KEYS) == scheduling}
        r, _ = _dry_run_commands(tmp_path, values)
        commands = _shell_commands(r.stdout)
        walks.update({key: (tmp_path / "PWNED", value, r, commands, scheduling) for key, value in values.items()})
    return walks


def _holds(command: str, value: str) -> bool:
    """Whether ``command`` holds any of ``value``: its text up to the first quote (the key's name),
    not as the start of a longer name (`ncu` in `ncu_profile`)."""
    return re.search(re.escape(value.split("'")[0]) + r"(?!\w)", command) is not None


@pytest.mark.parametrize("key", TEXT_KEYS)
def test_a_hostile_value_of_every_key_arrives_as_one_argument(request, tmp_path, key, rules_with_shell):
    """Each config key that can hold text, set to a value with quotes, $( ), backticks, ;, spaces and a
    newline: in every command of the dry run that holds it, it is one argument (or part of one), and
    every $ and backtick of it sits in single quotes; a key that names a workload or variant refuses it."""
    if key in REFUSED_NAMES:
        marker = tmp_path / "PWNED"
        r, _ = _dry_run_commands(tmp_path, {key: _hostile_value(tmp_path, key)})
        out = r.stdout + r.stderr
        assert not marker.exists()
        assert r.returncode != 0, f"{key}: a hostile name was accepted"
        assert key.split(".")[0].replace("*", "") in out or "no such" in out or "variant" in out, out[-1500:]
        return
    marker, value, r, commands, scheduling = request.getfixturevalue("hostile_walk")[key]
    out = r.stdout + r.stderr
    assert not marker.exists()
    assert r.returncode == 0, out[-3000:]
    _COVERED.update(rule for rule, _ in commands)
    if not scheduling:
        # none of the other values set with this one left a rule out of the walk
        hidden = rules_with_shell - {rule for rule, _ in commands}
        assert not hidden, f"rules the hostile values of this dry run left out (add the key to SCHEDULE_KEYS): {hidden}"
    reached = 0
    for rule, command in commands:
        if not _holds(command, value):
            continue
        words = shlex.split(command)
        holding = [w for w in words if value in w]
        assert holding, f"{key} in rule {rule}: the value was split or cut: {command!r}"
        # the one word holds the whole value: nothing of it became shell syntax around it
        rebuilt = shlex.join(words)
        assert rebuilt.count("touch") == command.count("touch"), (rule, command)
        quoted = [q for _, q in _quote_states(command)]
        starts = [i for i in range(len(command)) if command.startswith(("$(touch", "`touch", "; touch"), i)]
        assert starts and all(quoted[i] for i in starts), \
            f"{key} in rule {rule}: $( ), ` or ; of the value outside single quotes: {command!r}"
        reached += 1
    if key in ("compare_base", "compare_cand", "python", "nsys", "ncu", "work_dir", "run_label",
               "nsys_profile.extra_args", "ncu_profile.extra_args", "reference.dir", "more_references.*"):
        assert reached, f"{key}: no dry-run command holds the value (the walk missed the rules that read it)"


def test_the_walk_saw_every_rule_with_a_shell_command(rules_with_shell):
    """Runs after the walk above (file order): the targets schedule every rule that has a shell."""
    if not _COVERED:
        pytest.skip("the walk did not run in this session")
    assert rules_with_shell <= _COVERED, f"rules no dry run printed: {sorted(rules_with_shell - _COVERED)}"


def test_an_unbalanced_quote_in_extra_args_is_refused_under_its_key(tmp_path):
    extra = _configfile(tmp_path, "ncu_profile:\n  extra_args: \"--cache-control 'all\"\n")
    r = _snakemake(["-n", "--cores", "1", "--configfile", "rules/config.yaml", extra, "--", "profile_all"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "ncu_profile.extra_args" in out and "No closing quotation" in out, out[-1500:]


@pytest.mark.parametrize("work_dir", ["/etc", "/usr/local/results", "/tmp", "/proc/self"])
def test_a_system_folder_as_work_dir_is_refused(work_dir):
    r = _snakemake(["-n", "--cores", "1", "rebuild_reports", "--config", f"work_dir={work_dir}"])
    out = r.stdout + r.stderr
    assert r.returncode != 0 and f"work_dir={work_dir!r}" in out and "folder" in out, out[-1500:]


@pytest.mark.parametrize("work_dir", ["/", "/etc", "/tmp", "/usr/lib/x"])
def test_cold_refuses_a_system_folder_as_work_dir(work_dir):
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", work_dir, "--", "true"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--work-dir" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "caches in" not in r.stderr  # refused before any cache folder was made


def test_cold_says_a_missing_program_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path / "w"), "--",
                        "/nonexistent"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == ["workloads.harness.cold: /nonexistent: no such program (not a file, "
                                             "or not executable, or not on PATH)"]


def test_cold_refuses_a_work_dir_below_a_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(blocker / "w"), "--", "true"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{blocker} is a file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _pattern_keys(schema):
    """The keys whose text the schema restricts to a pattern (names, the trace list)."""
    return _string_keys(schema, lambda s: s.get("pattern") not in _FILE_PATTERNS)


@pytest.mark.parametrize("key", sorted(set(_pattern_keys(__import__("yaml").safe_load(
    (REPO / "rules" / "schemas" / "config.schema.yaml").read_text())))))
def test_a_hostile_value_of_a_key_with_a_pattern_is_refused_by_the_schema(tmp_path, key):
    marker = tmp_path / "PWNED"
    r, _ = _dry_run_commands(tmp_path, {key: _hostile(key, marker)})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "does not match" in out, out[-1500:]
    assert not marker.exists()
