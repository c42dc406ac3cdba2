"""Where parbench runs: the logical devices and the physical ones behind them, the job this
process sits in (alone, torchrun or Slurm), and the environment every result is stamped with."""
