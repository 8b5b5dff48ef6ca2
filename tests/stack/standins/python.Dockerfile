# A stand-in for Docker Hub's python:3.11-slim-bookworm, built where no registry can be reached (make test-compose
# builds it; a machine that can pull the official image never does). The official image's interface, as
# tests/stack/Dockerfile uses it: CPython 3.11 in /usr/local, python, python3 and pip on the PATH, pip installing
# system-wide, apt-get working as root.
# The interpreter is not bookworm's: its Python 3.11.2 is older than packages of requirements.txt accept
# (soupsieve 4.1.2 needs 3.11.5). compose_stack.py brings this machine's own CPython 3.11 build (cpython.tar.gz: its
# interpreter, libpython and standard library, as the official image builds them into /usr/local), and the Debian
# libraries its modules link to come from bookworm's packages.
FROM kinesis-replay-standin/bookworm:minbase
# The certificate authorities this machine trusts beyond Debian's (compose_stack.py copies them in: an egress proxy's,
# say), so that what the builds fetch from PyPI is checked as the machine checks it.
COPY extra-ca/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libbz2-1.0 libexpat1 libffi8 liblzma5 libncursesw6 \
      libnsl2 libreadline8 libsqlite3-0 libssl3 libtirpc3 libuuid1 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && update-ca-certificates
ADD cpython.tar.gz /usr/local/
ENV PATH=/usr/local/bin:$PATH LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN ldconfig \
 && ln -s python3.11 /usr/local/bin/python3 \
 && ln -s python3 /usr/local/bin/python \
 && python3 -m ensurepip --default-pip >/dev/null \
 && ln -sf pip3 /usr/local/bin/pip \
 && pip install --no-cache-dir --quiet --upgrade pip \
 && python -c "import ssl, sqlite3, ctypes, lzma, bz2, zlib, uuid, readline; print('python', __import__('sys').version)"
CMD ["python3"]
