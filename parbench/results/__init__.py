"""What a run keeps: the typed record of each configuration, the comparisons between records
(paired by round, with intervals and verdicts), and run folders written and read back."""
