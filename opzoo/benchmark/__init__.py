"""``opzoo benchmark``: parameters, FLOPs, activation memory and CPU time per step of presets, beside the upstream code
where it is installed (:mod:`.presets`), and the counters it uses (:mod:`.measure`)."""
