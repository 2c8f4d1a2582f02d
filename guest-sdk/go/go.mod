module example.invalid/weir/guest-sdk/go

go 1.24
