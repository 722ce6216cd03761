"""The quality race (``python -m benchmarks.quality_race``): what a race is (:mod:`.races`, :mod:`.arms`), its tiers
(:mod:`.tier`, :mod:`.tiers`, one module per family), data sets (:mod:`.data`),
harness and cache of runs (:mod:`.harness`), measures (:mod:`.sample_quality`, :mod:`.steps_to_target`,
:mod:`.allocation_metrics`), aggregation (:mod:`.summary`), report (:mod:`.report`) and figures (:mod:`.figures`)."""
