"""What the device at hand costs, measured and kept: profiles, contention, probes, its link."""
