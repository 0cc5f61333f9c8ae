Bgrad.block2.layer1.cbr.1.weightJ >};¼
$ê;«IÂ:(¼0³e»µ<Ižt¼ËAˆ<