"""How a size in bytes is written, everywhere: build logs, the variants table, the
version page. One formatter, so the log and the table say the same figure: IEC units
(1 KiB = 1024 bytes), three significant digits ("540 KiB", "1.23 MiB")."""

UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def human_size(n_bytes: int | float | None) -> str:
    if n_bytes is None:
        return "—"
    value, unit = float(n_bytes), 0
    while abs(value) >= 1024 and unit < len(UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value)} bytes" if int(value) != 1 else "1 byte"
    if abs(value) >= 100:
        return f"{value:.0f} {UNITS[unit]}"
    return f"{value:.3g} {UNITS[unit]}" if abs(value) >= 10 else f"{value:.2f} {UNITS[unit]}"
