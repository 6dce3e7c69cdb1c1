"""XLA programs: HLO, cost, op profile, HLO op stats, roofline, memory and graph viewers."""
