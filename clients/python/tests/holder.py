"""A holder in a process of its own, for the tests that kill one: it campaigns, prints
``token T session S`` and then keeps its leadership (its keepalive thread renewing it) until
it is killed.

    python holder.py URL ELECTION TTL_S FATE_SHARING(0|1)
"""

import sys
import time

import tenure


def main() -> None:
    url, election, ttl, fate_sharing = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
    client = tenure.Client(url)
    lead = client.campaign(election, b"holder", ttl=ttl, fate_sharing=fate_sharing, timeout=20)
    print(f"token {lead.token} session {lead.session}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
