"""The asv suite: every strategy's throughput, memory and scaling, measured by parbench."""
