# Site settings for profiles/slurm: one copy per cluster, sourced before running Snakemake.
#
#   cp profiles/slurm/site.example.sh ~/cookbook-site.sh     # then edit the copy
#   source ~/cookbook-site.sh
#   snakemake --profile profiles/slurm profile_all
#
# Jobs inherit this shell's environment (the plugin submits with sbatch --export=ALL), so what is
# exported and loaded here is what the GPU jobs see.

# The partition with the GPUs: `sinfo -s` lists the partitions, `sinfo -o "%P %G"` their GPUs.
# Unset: "gpu"; empty: the cluster's default partition.
export COOKBOOK_SLURM_PARTITION=gpu

# The account (project) to charge: `sacctmgr show associations user=$USER format=account`.
# Empty: the plugin takes the account of your latest job, or submits without one.
export COOKBOOK_SLURM_ACCOUNT=

# One GPU type, where the partition has several (`sinfo -o "%P %G"` shows gpu:TYPE:COUNT), e.g.
# h200. Empty: any GPU. Timings compare only between runs on the same type.
export COOKBOOK_SLURM_GPU_TYPE=

# Nsight Systems, Nsight Compute and CUDA, where the cluster provides them as modules (names and
# versions differ per site: `module avail nsight`). Loaded here, before Snakemake starts, they are
# on PATH in every job too. Where the login and the GPU nodes have different module trees, list
# them in rules/config.yaml `cluster.envmodules` instead: each GPU job then loads them itself.
# module load cuda/13.0 nsight-systems/2025.3.1 nsight-compute/2025.3.1

# The Python environment with the suite (on a file system the GPU nodes see too), e.g.
# conda activate gpu-cookbook
