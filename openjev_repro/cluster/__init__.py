"""Studies on a Slurm cluster: one job array of replicate studies, followed and resumed, then
collected into a cross-host reproducibility report.

    slurm.py        sbatch/squeue/sacct through their JSON output (never human-formatted text)
    submit.py       sbatch a new submission, or --resume the replicates without complete evidence
    status.py       each replicate's Slurm and evidence state; the final Slurm state into ended runs
    submission.py   the submission directory: submission.json, replicate-<k>/ attempts, evidence state
    jobscript.py    the sbatch script of a submission
    task.py         the array task: runs `invoke study`, records how the Slurm job ended
    crosshost.py    per backend across hosts: spread of the means, flips, tolerances
    collect.py      verify, compare, write and sign the cross-host summary (Markdown, JSON, plot)

What a task got from Slurm (job, array index, node, GPU) is a host concern: host/allocation.py,
recorded in host.json by host/session.py. The CLI (`invoke submit|status|collect`) is openjev_repro/cli/cluster.py; docs/cluster.md.
"""
