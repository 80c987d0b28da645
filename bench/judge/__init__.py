"""python -m bench judge: the canary judge's and the experiment analysis' error rates, measured
by replaying recorded noise with graded injected faults (bench/judge/run.py);
`python -m bench judge record NAME`: record a trace (bench/judge/record.py);
`python -m bench judge table [var/bench/judge.json]`: print a finished run's tables again."""


def main(argv: list[str]) -> int:
    if argv[:1] == ["record"]:
        from bench.judge import record

        return record.main(argv[1:])
    from bench.judge import run

    if argv[:1] == ["table"]:
        return run.table(argv[1:])

    return run.main(argv)
