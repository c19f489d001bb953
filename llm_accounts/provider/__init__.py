"""What the provider says about an organization's spend, read and used as evidence
(docs/architecture.md "Settling from the provider").

- ``client``: the Admin API readers, one per documented shape: the Usage and Cost Analytics API
  (``/v1/organizations/analytics/usage`` and ``/cost``) first, the legacy usage and cost reports
  as the fallback, and the list of API key ids. Paging, bounds and the untrusted-string rules live
  here and nowhere else.
- ``report``: a report's rows parsed into what the rules can trust, one parser per documented
  shape.
- ``rules``: the pure matching rules. Given the ledger's attempts and a report's rows, which open
  attempts the report *proves* the cost of (alone, or as a group), and why every other one stays
  open. No I/O, no clock.
- ``settle``: the pass. Reads each organization's report once per window, runs the rules,
  records each settlement as a reconciliation naming the report rows it rests on; runs by command
  (``llm accounts reconcile --from-provider``) or by itself off the request path.
- ``audit``: the ledger against the organization's bill, difference broken down by cause.
"""
