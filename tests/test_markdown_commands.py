"""The commands block of a recipe page: commands that differ only in the variant are one shell loop,
which runs exactly those commands."""
import subprocess

from analysis.report import markdown as md
from analysis.model import report_model as rm


def _command(tool: str, variant: str, size: int = 62500) -> rm.Command:
    argv = ("printf", "%s\\n", "--variant", variant, "--size", str(size), "--nvtx-include",
            f"cookbook@warp_sph\\/{variant}\\/compute/", "--output",
            f"results/captures/warp_sph/{variant}/n{size}/{tool}-run.json", "it's")
    return rm.Command(tool, f"{variant}/n{size}", argv, "test")


def _printed(lines: list[str]) -> str:
    return subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, check=True).stdout


def test_commands_that_differ_only_in_the_variant_are_one_loop_that_runs_them_exactly():
    cmds = [_command("nsys", v) for v in ("baseline", "graph", "fused")] + [_command("ncu", "pruned"),
                                                                              _command("nsys", "cell_list", 100)]
    lines = md.command_lines(cmds)
    assert len(lines) == 3 and lines[0].startswith("for v in baseline graph fused; do printf")
    assert _printed(lines) == _printed([md.shlex.join(c.argv) for c in cmds])


def test_a_command_without_its_variant_in_it_stays_as_it_is():
    c = rm.Command("timed", "baseline/n1", ("python", "-m", "x"), "test")
    assert md.command_lines([c, c]) == ["python -m x", "python -m x"]
