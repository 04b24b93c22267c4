"""Multi-node through torchrun's rendezvous: two "nodes" of one process each on localhost, over gloo."""
import subprocess
import sys

from mlflow import MlflowClient

from tests.helpers import TINY, free_port


def test_two_nodes_of_one_process_train_as_one_run(project, image_dataset):
    (project / "experiments" / "tiny.yaml").write_text(TINY.format(root=image_dataset))
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [subprocess.Popen([sys.executable, "-m", "runner", "launch", "experiments/tiny.yaml",
                               "trainer.nnodes=2", f"trainer.node_rank={k}", f"trainer.rdzv_endpoint={endpoint}",
                               "trainer.rdzv_id=test-multinode", "trainer.devices=1"],
                              cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in (0, 1)]
    outs = [n.communicate(timeout=300)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert all("--nnodes=2" in o and f"--rdzv-endpoint={endpoint}" in o for o in outs)
    assert sum(o.count("tiny: summary") for o in outs) == 1  # rank 0 alone reports
    client = MlflowClient(f"sqlite:///{project}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["runner.world_size"] == "2"
    # 24 images over 2 ranks, batch 4: 3 steps an epoch on each; each val image evaluated once
    run_id = runs[0].info.run_id
    assert [m.step for m in client.get_metric_history(run_id, "train/loss")] == [2, 3, 4, 6]
    assert [m.value for m in client.get_metric_history(run_id, "eval/samples")] == [9, 9]
