"""Many runs: the registry's types, a study's grid swept, finished runs reused, runs.csv indexed. Above core/;
names no study (the study layer registers into it)."""
