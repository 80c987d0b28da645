"""The factory's tune stage: serving configs found, not guessed.

For a servable variant and a latency SLO (the endpoint's p99, or one given) it loads the
model in a scratch `tritonserver` and measures candidate configs with the platform's load
generator, climbing from the factory's default until no neighbour is better, the time or
trial budget is spent, or the space is exhausted; the best config within the SLO becomes
the servable variant `{variant}-tuned` with the table of what was tried as its evidence.

- space.py   the dimensions and values searched (CPU: instances, ONNX Runtime threads,
             preferred batch, queue delay; GPU: instance groups, batching, TensorRT precision)
- search.py  the climb: state in, decision out (table-tested)
- scratch.py the scratch tritonserver, the load generator's process, request bodies, CPU use
- measure.py one trial on them: concurrency sweep, open-loop rate search; a closing run again
- tuner.py   one variant's search: its budget on the wall clock, its trials, the closing runs
- stage.py   the stage the build runs (registry/factory/stages.py dispatches to it)
"""
