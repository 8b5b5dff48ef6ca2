"""How the replay job is started: spark-submit (local or a cluster), EMR Serverless, the JVM archive and the job's credentials."""
