// Command cri-reset stops and removes every pod sandbox and container that a
// CRI runtime knows about, so that `e2e/local-cluster.sh down` leaves no
// container, network namespace, veth or mount behind: StopPodSandbox runs the
// CNI DEL that releases the pod's address and deletes its interfaces, which
// killing the processes would not.
//
// Usage: cri-reset -endpoint unix:///path/to/containerd.sock [-timeout 60s]
//
// It exits non-zero, naming what is left, when anything survives.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	endpoint := flag.String("endpoint", "", "the CRI socket, unix:///...")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	if *endpoint == "" {
		fmt.Fprintln(os.Stderr, "cri-reset: -endpoint unix:///path/to/socket is required")
		os.Exit(2)
	}
	if err := reset(*endpoint, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "cri-reset: %v\n", err)
		os.Exit(1)
	}
}

func reset(endpoint string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)

	sandboxes, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes at %s: %w", endpoint, err)
	}
	for _, sb := range sandboxes.Items {
		name := sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName()
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("stopping the sandbox of pod %s (%s): %w", name, sb.Id, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			return fmt.Errorf("removing the sandbox of pod %s (%s): %w", name, sb.Id, err)
		}
	}
	// Containers outside any sandbox should not exist; remove them anyway.
	containers, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("listing containers at %s: %w", endpoint, err)
	}
	for _, c := range containers.Containers {
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.Id, Timeout: 0}); err != nil {
			return fmt.Errorf("stopping container %s (%s): %w", c.GetMetadata().GetName(), c.Id, err)
		}
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			return fmt.Errorf("removing container %s (%s): %w", c.GetMetadata().GetName(), c.Id, err)
		}
	}

	left, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes again: %w", err)
	}
	leftC, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return fmt.Errorf("listing containers again: %w", err)
	}
	if n, m := len(left.Items), len(leftC.Containers); n+m > 0 {
		return fmt.Errorf("%d sandbox(es) and %d container(s) are still there after removal", n, m)
	}
	fmt.Printf("cri-reset: removed %d pod sandbox(es) and %d stray container(s)\n",
		len(sandboxes.Items), len(containers.Containers))
	return nil
}
