"""Splits a `perf script` dump of the router (`perf script -F comm,tid,ip,sym`) into the parts of
the router profiles in docs/benchmarks.md "router_external (`benches/router_external.rs`)":
each sample goes to the first part whose test matches any frame of its stack. Usage:

    python3 benches/support/profile_parts.py router.script REQ_PER_S CORES

REQ_PER_S is the router block's rate and CORES the router's busy cores during the recording
(samples / frequency / seconds); with both, each part's share is also given in µs per request.
"""
import sys, collections
text = open(sys.argv[1]).read()
samples = text.split("\n\n")
PARTS = [
 ("socket write to the client (writev, with loopback delivery)", lambda s: has(s,"writev") and not upstream(s)),
 ("socket write to the upstream (writev, with loopback delivery)", lambda s: has(s,"writev") and upstream(s)),
 ("socket reads (recvfrom)", lambda s: has(s,"recvfrom") or has(s,"__libc_recv") or has(s, "sys_recvfrom")),
 ("usage: queue push, writer fold, SQLite", lambda s: has(s,"usage_writer") or has(s,"write_usage") or has(s,"sqlite3") or has(s,"UsageQueue") or has(s,"UsageTally")),
 ("client key check (Authorized, SHA-256)", lambda s: has(s,"known_key") or has(s,"Authorized")),
 ("request parse (router::http::parse, head)", lambda s: has(s,"router::http::parse") or has(s,"router::head")),
 ("answer facts (stream::answer_facts, usage_tokens)", lambda s: has(s,"answer_facts") or has(s,"usage_tokens") or has(s,"stream::raw_usage_tokens") or has(s,"router::stream::Watch")),
 ("ranking, lanes, affinity", lambda s: has(s,"router::lanes") or has(s,"core::selection") or has(s,"core::affinity")),
 ("attempt::served (usage record, metrics)", lambda s: has(s,"attempt::served") or has(s,"attempt::usage")),
 ("upstream client: hyper-util pool, HTTP/1 encode and parse", lambda s: upstream(s)),
 ("router handler, the rest (attempt, http::handle, answer)", lambda s: has(s,"quota_patrol::router")),
 ("hyper server connection and axum: HTTP/1 parse, encode, dispatch", lambda s: has(s,"hyper::proto") or has(s,"axum::") or has(s,"hyper_util::server")),
 ("parking and waking threads (epoll, futex)", lambda s: has(s,"epoll_wait") or has(s,"futex") or has(s,"schedule")),
 ("Tokio scheduler, the rest", lambda s: has(s,"tokio::runtime")),
 ("allocator (jemalloc) outside the above", lambda s: has(s,"je_") or has(s,"jemalloc")),
 ("other", lambda s: True),
]
def has(s, needle): return needle in s
def upstream(s): return ("hyper_util::client" in s) or ("hyper::client" in s) or ("proto::h1::role::Client" in s) or ("dispatch::Client" in s) or ("router::upstream" in s)
counts = collections.Counter(); total = 0
for smp in samples:
    lines = smp.strip().split("\n")
    if len(lines) < 2: continue
    total += 1
    stack = "\n".join(lines[1:])
    for name, pred in PARTS:
        if pred(stack):
            counts[name] += 1; break
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 0
cores = float(sys.argv[3]) if len(sys.argv) > 3 else 0
print(f"samples {total}")
us_per = (cores * 1e6 / rate) if rate else 0
for name, _ in PARTS:
    c = counts[name]
    print(f"| {name} | {100*c/total:.1f} % | {us_per*c/total:.1f} |")
