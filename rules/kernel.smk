# One kernel of one workload variant under ncu, with line information and the sources imported, and
# its page: key metrics and the hottest source lines (workloads/tools/kernel_profile.py,
# analysis/report/kernel_page.py).
#
#   snakemake kernel_page --config kernel_workload=warp_sph kernel_variant=baseline kernel_name=get_acceleration
#   snakemake kernel_page --config ... kernel_line_directives=False   # Warp: lines of the generated CUDA-C
#   snakemake reports/kernels/<workload>_<variant>_<kernel>.md      # or name a page not committed yet
#   snakemake rebuild_kernel_pages       # no GPU: pages from the committed captures, checked against reports/kernels
#
# Each reference's kernel pages are published beside its recipe pages: the captures under
# reports/reference/<gpu>/kernels/ become <reference pages>/kernels/ (reports/kernels/ for the H200,
# reports/h100/kernels/ for the H100), and rebuild_kernel_pages checks only the pages of the
# reference it runs for (--configfile rules/reference_h100.yaml: the H100's).
#
# A page is named <workload>_<variant>_<kernel>[_cuda_c]; its capture is
# <work_dir>/captures/kernels/<page>/ (kernel.ncu-rep, kernel-run.json), and `capture_reference`
# copies it into the reference with the rest.


wildcard_constraints:
    page="[A-Za-z0-9_]+",


rule kernel_capture:
    """One cold run of the variant under ncu (--set full, sources imported), one launch of the kernel."""
    input:
        f"{CAPTURES}/preflight.json",
    output:
        rep=f"{CAPTURES}/kernels/{{page}}/kernel.ncu-rep",
        run=f"{CAPTURES}/kernels/{{page}}/kernel-run.json",
    log:
        f"{WORK}/logs/kernels/{{page}}.log",
    params:
        python=PYTHON,
        ncu=NCU,
        # the cold runs' cache root, as every profiled run has (workloads/harness/cold.py)
        work=lambda wc: WORK,
        gpus=config["gpus"],
        args=kernel_profile_args,
        out_dir=lambda wc, output: os.path.dirname(output.rep),
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m workloads.tools.kernel_profile {params.args} --ncu {params.ncu:q}"
        " --python {params.python:q} --work-dir {params.work:q} --gpus {params.gpus:q}"
        " --output-dir {params.out_dir:q} > {log:q} 2>&1"


rule kernel_page_md:
    """A kernel's page, from a live capture or a committed one ({set}); `publish` copies live pages
    into reports/kernels/."""
    input:
        unpack(kernel_page_inputs),
    output:
        f"{REPORTS}/{{set}}/kernels/{{page}}.md",
    log:
        f"{WORK}/logs/report/{{set}}/kernels/{{page}}.log",
    params:
        python=PYTHON,
        top=config["kernel_top_lines"],
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis kernel-page --report {input.rep:q} --run {input.run:q}"
        " --top {params.top:q} --output {output:q} > {log:q} 2>&1"


rule kernel_page:
    """The page the --config kernel_* keys name (see the top of rules/kernel.smk)."""
    input:
        requested_kernel_page,


#: the kernel pages whose captures are in this run's reference folder: another GPU's are checked by
#: that reference's own rebuild, against its own pages
KERNEL_PAGES_OF_REFERENCE = sorted(p for p, d in REFERENCE_KERNEL_DIRS.items() if d.startswith(f"{REF_DIR}/"))
KERNEL_PAGES_COMMITTED = os.path.join(config["reference"].get("pages", "reports"), "kernels")


rule check_kernel_pages:
    input:
        expand(f"{REPORTS}/reference/kernels/{{page}}.md", page=KERNEL_PAGES_OF_REFERENCE),
    output:
        touch(f"{REPORTS}/reference/kernels/CHECKED"),
    log:
        f"{WORK}/logs/report/reference/kernels/check.log",
    params:
        python=PYTHON,
        rebuilt=lambda wc, output: os.path.dirname(output[0]),
        committed=KERNEL_PAGES_COMMITTED,
    conda:
        CONDA_ENV
    shell:
        "{params.python:q} -m analysis check-rebuild --rebuilt {params.rebuilt:q} --committed {params.committed:q}"
        " 2>&1 | tee {log:q}"


rule rebuild_kernel_pages:
    """This reference's kernel pages rebuilt from its committed captures (no GPU), checked against its
    committed kernel pages (reports/kernels for the H200)."""
    input:
        [f"{REPORTS}/reference/kernels/CHECKED"] if KERNEL_PAGES_OF_REFERENCE else [],
