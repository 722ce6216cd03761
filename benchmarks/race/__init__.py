"""The quality race (``python -m benchmarks.quality_race``): its tiers (:mod:`.tiers`), data sets (:mod:`.data`),
harness and cache of runs (:mod:`.harness`), measures (:mod:`.sample_quality`, :mod:`.steps_to_target`,
:mod:`.allocation_metrics`), aggregation (:mod:`.summary`), report (:mod:`.report`) and figures (:mod:`.figures`)."""
