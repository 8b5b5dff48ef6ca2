# A stand-in for Docker Hub's node:22-bookworm-slim, built from Debian bookworm's own packages where no registry can be
# reached (make test-compose builds it; a machine that can pull the official image never does).
# The official image's interface, as tests/stack/Dockerfile uses it: node and npm on the PATH, a user node (uid 1000),
# apt-get working as root. bookworm's Node.js is 18, not 22: kinesalite runs on both.
FROM kinesis-replay-standin/bookworm:minbase
# The certificate authorities this machine trusts beyond Debian's (compose_stack.py copies them in: an egress proxy's,
# say), so that what the builds fetch from PyPI and npm is checked as the machine checks it.
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && update-ca-certificates \
 && useradd --create-home --uid 1000 --shell /bin/bash node
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
CMD ["node"]
