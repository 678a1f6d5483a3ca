module kube-extender.invalid/go-noop

go 1.22
