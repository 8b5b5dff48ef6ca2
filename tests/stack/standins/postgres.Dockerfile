# A stand-in for Docker Hub's postgres:16-bookworm, built from Debian bookworm's own packages where no registry can be
# reached (make test-compose builds it; a machine that can pull the official image never does).
# The official image's interface, as docker-compose.yml uses it: POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB
# create the cluster, its superuser and database on first start in an empty /var/lib/postgresql/data, password
# authentication over the network; pg_isready and sh on the PATH. bookworm's PostgreSQL is 15, not 16.
FROM kinesis-replay-standin/bookworm:minbase
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql-15 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
VOLUME /var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["postgres"]
