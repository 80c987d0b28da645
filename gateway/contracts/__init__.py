"""What the control plane imports from the gateway: the route table and feedback schemas, the
feedback rules, the outbound URL rule and the durable log's contract. Pure: no I/O at import, no
other gateway package.
"""

from pathlib import Path

ROUTE_TABLE_SCHEMA = Path(__file__).with_name("route_table.schema.json")  # the table both sides check
