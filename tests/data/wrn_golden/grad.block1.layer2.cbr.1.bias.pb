Bgrad.block1.layer2.cbr.1.biasJ bå,=x+½Ü®=
w·<Äoª<V0=˜ÚJ<¹«S<