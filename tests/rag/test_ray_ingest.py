"""`rag index --ray` into Postgres on a real local Ray cluster (`ray start --head --block` on
127.0.0.1, stopped by its PID): the same documents and chunk ids as the single-process ingest,
embeddings and postings written by the actors, and an unchanged re-run that writes nothing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from indexing.pg_local import free_port
from tests.readiness import process_alive, stop_later, wait_for


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    exe = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if exe is None:
        pytest.skip("the ray command is not on PATH")
    port = free_port()
    # Both the cluster and this driver must stay on 127.0.0.1: without these Ray publishes and dials
    # the eth0 address.
    # (token auth off: a loopback-only test cluster; a stale ~/.ray token otherwise locks the driver out)
    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
                                            "RAY_AUTH_MODE")}
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_AUTH_MODE="disabled")
    env = dict(os.environ)
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[data]')")  # after the env
    log = tmp_path_factory.mktemp("ray") / "ray.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([exe, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                                 "--num-cpus=3", "--include-dashboard=false", "--disable-usage-stats",
                                 "--object-store-memory=200000000"], stdout=fh, stderr=subprocess.STDOUT, env=env)
    address = f"127.0.0.1:{port}"
    try:
        def connect() -> bool:
            ray.init(address=address, log_to_driver=False, _node_ip_address="127.0.0.1")
            return True

        # ray is installed (`make install`), so a cluster that does not come up is a failure
        wait_for(connect, "the local Ray cluster did not accept the driver", timeout=180,
                 alive=process_alive(proc), log=log, interval=0.5)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # `ray start --block` stops the processes it started; that takes ~30 s of waiting, reaped at
        # the session's end while other tests run
        stop_later(proc, signal.SIGTERM)


def test_ray_ingest_matches_single_process(ray_cluster, pg_dsn, corpus_dir, tmp_path):
    from rag.app import build_ingestor, build_retriever, open_store
    from rag.config import load_config
    from rag.ray_ingest import ingest_with_ray

    cfg = load_config(None, ["storage.backend=postgres", f"storage.dsn={pg_dsn}", f"storage.path={tmp_path}",
                             "retrieval.embedder.model=minilm"])
    with open_store(cfg) as store:
        retriever = build_retriever(cfg, store)
        rep = ingest_with_ray(cfg, store, retriever, [str(corpus_dir)], "ray", progress=False, workers=2,
                              batch_size=2)
        single = build_ingestor(cfg, store).ingest([str(corpus_dir)], collection="single", progress=False)
        assert rep.new == single.new == 6 and rep.chunks == single.chunks and not rep.failed

        def rows(coll: str) -> list:
            return sorted((c.chunk_id, c.int_id, c.doc_id, c.start, c.end, c.text, c.granularity, c.metadata)
                          for c in store.iter_chunks(coll))

        assert rows("ray") == rows("single") and rows("ray")
        with store.conn() as db:  # the actors wrote every index row: nothing left for the driver to embed
            assert db.execute("SELECT count(*) FROM chunks WHERE collection = 'ray' AND (index_hash IS NULL "
                              "OR embedding IS NULL)").fetchone()[0] == 0
            assert db.execute("SELECT count(*) FROM rag_postings WHERE collection = 'ray'").fetchone()[0] > 0
        assert retriever.sync("ray")["ray"]["added"] == 0
        top = retriever.search("drone flight time", k=2, collection="ray").candidates[0]
        assert "/products/xr" in top.chunk.source and set(top.ranks) == {"bm25", "dense"}
        again = ingest_with_ray(cfg, store, retriever, [str(corpus_dir)], "ray", progress=False)
        assert (again.new, again.changed, again.unchanged) == (0, 0, 6)
