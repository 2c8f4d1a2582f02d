module example.invalid/weir/plugins-polyglot/flight-delays-go

go 1.24

require example.invalid/weir/guest-sdk/go v0.0.0

replace example.invalid/weir/guest-sdk/go => ../../guest-sdk/go
