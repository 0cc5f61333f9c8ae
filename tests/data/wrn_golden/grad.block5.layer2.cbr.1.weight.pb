Bgrad.block5.layer2.cbr.1.weightJ@8Ð
½­X0¼¢Úï<M=Ä$Ó¼ú€µ»¯ò <ïT=Zéw<8`—º·:<0|´¼Ö*b¼‰Õ¨<¹–r<y`ü¼