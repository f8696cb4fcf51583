"""Commands built on the engine: the main job (sweep, publish, compare), re-scoring, benchmarks, throughput."""
