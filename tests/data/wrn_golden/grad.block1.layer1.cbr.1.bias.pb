Bgrad.block1.layer1.cbr.1.biasJ ^¹ºV#À¼,ËP:Œ
Ø:µê<ª..;õÔ<6ÇF¼