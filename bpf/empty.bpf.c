#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "tenge_abi.h"
char LICENSE[] SEC("license") = "GPL";
