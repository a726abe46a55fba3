def format_cents(cents):
    """1234 -> '$12.34', 5 -> '$0.05'."""
    return f"${cents // 100}.{cents % 100}"
