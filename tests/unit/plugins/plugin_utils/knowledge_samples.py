"""Documents as an operator keeps them (a Markdown guide, plain-text notes, a man page), for the knowledge base's
tests (brain/test_knowledge.py, brain/test_chunking.py)."""

from __future__ import annotations

NGINX_GUIDE = """\
# nginx on the web tier

Our nginx serves the shop on port 80 and 443 from /etc/nginx/sites-enabled.

## Reloading

Run `nginx -t` first, then `service nginx reload`. A reload keeps connections open.

## Logs

Errors go to /var/log/nginx/error.log; access logs rotate daily at 03:00.

```sh
# a fence: this is not a heading
tail -n 50 /var/log/nginx/error.log
```
"""


POSTGRES_NOTES = """\
PostgreSQL 15 runs the orders database. Checkpoints happen every five minutes; a checkpoint
that takes longer than that shows up as "checkpoints are occurring too frequently" in the log.
Never delete files from pg_wal by hand: restore from the base backup instead.
"""


NGINX_MAN = r""".\" the nginx manual page, shortened
.TH NGINX 8 "2024" "nginx 1.22"
.SH NAME
\fBnginx\fR \- HTTP and reverse proxy server
.SH SYNOPSIS
.B nginx
.RB [ \-t ]
.SH DESCRIPTION
nginx (pronounced \(lqengine x\(rq) is an HTTP and reverse proxy server,
a mail proxy server, and a generic TCP/UDP proxy server.
.SS "Testing the configuration"
.TP
.B \-t
Do not run, just test the configuration file.
"""
